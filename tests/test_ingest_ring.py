"""The ring between ingest receive threads and verify workers (app/engine/ingest/ring.py)."""

from __future__ import annotations

import threading

import pytest

from app.engine.ingest.ring import Entry, Ring


class _Route:
    alive = True

    def send(self, data, done):
        done(True)


def entry(tag: int, transport: str = "tcp") -> Entry:
    return Entry(buffer=tag, length=16, route=_Route(), transport=transport)


def test_fifo_and_capacity():
    ring = Ring(3)
    assert [ring.try_put(entry(i)) for i in range(4)] == [True, True, True, False]
    assert ring.full() and len(ring) == 3
    st = ring.stats()
    assert (st["depth"], st["high_water"], st["put_total"], st["full_total"]) == (3, 3, 3, 1)
    assert [e.buffer for e in ring.take(2, timeout=0)] == [0, 1]
    assert ring.try_put(entry(3)) and ring.try_put(entry(4)) and not ring.try_put(entry(5))
    assert [e.buffer for e in ring.take(10, timeout=0)] == [2, 3, 4]  # wraps around in order
    assert ring.take(10, timeout=0) == []
    assert ring.stats()["high_water"] == 3


def test_depth_and_high_water_per_transport():
    ring = Ring(8)
    for i in range(3):
        ring.try_put(entry(i, "udp"))
    ring.try_put(entry(9, "quic"))
    assert ring.depth("udp") == (3, 3) and ring.depth("quic") == (1, 1) and ring.depth("tcp") == (0, 0)
    ring.take(2, timeout=0)
    assert ring.depth("udp") == (1, 3)


def test_take_waits_for_the_first_then_lingers_for_more():
    ring = Ring(8)
    got: list = []

    def consumer():
        got.extend(ring.take(4, timeout=5, linger=5))

    t = threading.Thread(target=consumer)
    t.start()
    for i in range(4):  # the fourth completes the take long before the 5 s linger ends
        ring.try_put(entry(i))
    t.join(10)
    assert not t.is_alive() and [e.buffer for e in got] == [0, 1, 2, 3]


def test_close_refuses_puts_and_drains():
    ring = Ring(4)
    ring.try_put(entry(1))
    ring.close()
    assert not ring.try_put(entry(2)) and ring.stats()["full_total"] == 0  # closed is not "full"
    assert [e.buffer for e in ring.take(4, timeout=1, linger=1)] == [1]
    assert ring.take(4, timeout=5) == []  # closed and empty: returns at once


def test_space_listener_called_after_a_producer_found_it_full():
    ring = Ring(1)
    calls = []
    ring.on_space(lambda: calls.append(1))
    ring.try_put(entry(1))
    ring.take(1, timeout=0)
    assert calls == []  # nobody was waiting
    ring.try_put(entry(2))
    assert not ring.try_put(entry(3))
    ring.take(1, timeout=0)
    assert calls == [1]


def test_many_producers_and_consumers_lose_and_repeat_nothing():
    ring = Ring(16)
    n, producers = 2000, 4
    taken: list[int] = []
    lock = threading.Lock()

    def produce(base):
        for i in range(n):
            while not ring.try_put(entry(base + i)):
                pass

    def consume():
        while True:
            got = ring.take(8, timeout=0.05, linger=0.001)
            if not got and ring.closed:
                return
            with lock:
                taken.extend(e.buffer for e in got)

    threads = [threading.Thread(target=produce, args=(k * n,)) for k in range(producers)]
    consumers = [threading.Thread(target=consume) for _ in range(2)]
    for t in threads + consumers:
        t.start()
    for t in threads:
        t.join(30)
    ring.close()
    for t in consumers:
        t.join(30)
    assert sorted(taken) == list(range(producers * n))
    assert ring.stats()["high_water"] <= 16


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        Ring(0)
