"""Admission by what has arrived and by time (app/engine/admission.py, app/api/admission.py;
docs/operations.md, "Load shedding"; issue 37): a request that declares a large body holds only
what it has sent, one request cannot hold the byte bound while others are turned away, and a
new request is refused when the work in flight would make it wait past the time bound."""

from __future__ import annotations

import asyncio

import pytest

from app.api.admission import AdmissionControl
from app.api.metrics import ADMISSION_REFUSALS, refresh_gauges
from app.core.errors import Overloaded
from app.engine.admission import Admission, ServiceRates

MiB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rates_take_the_marginal_time_not_the_time_spent_queued():
    clock = Clock()
    rates = ServiceRates(alpha=1.0, clock=clock)
    assert rates.per_item("ed25519") is None and rates.seconds({"ed25519": 100}) == 0.0
    rates.observe("ed25519", 2, 0.08, end=9.0)  # the cold first batch: not taken
    assert rates.per_item("ed25519") is None
    rates.observe("ed25519", 1000, 0.5, end=10.0)  # alone: 0.5 ms per item
    assert rates.per_item("ed25519") == pytest.approx(0.0005)
    # Queued 3 s behind the first, then ran 0.5 s: its own cost is the 0.5 s after the first ended.
    rates.observe("ed25519", 1000, 3.5, end=10.5)
    assert rates.per_item("ed25519") == pytest.approx(0.0005)
    # Two batches served side by side, ending together: 1 s for both, half each.
    r = ServiceRates(alpha=0.5, min_items=200)
    r.observe("ml-dsa-44", 1, 0.2, end=10.0)  # cold
    r.observe("ml-dsa-44", 100, 1.0, end=11.5)
    assert r.per_item("ml-dsa-44") is None  # 100 of the 200 items it wants
    r.observe("ml-dsa-44", 100, 1.0, end=11.5)
    assert r.per_item("ml-dsa-44") == pytest.approx(0.005)  # 200 items in 1 s
    assert rates.seconds({"ed25519": 2000, "unmeasured": 10**6}) == pytest.approx(1.0)


def _measured(max_wait: float, **kw) -> Admission:
    adm = Admission(max_items=10**6, max_bytes=1 << 30, retry_after=1.0, max_wait=max_wait, **kw)
    adm.rates.observe("ed25519", 2, 0.08, end=0.5)  # cold: not taken
    adm.rates.observe("ed25519", 1000, 1.0, end=1.5)  # 1 ms per item
    return adm


def test_a_new_request_is_refused_when_the_work_in_flight_is_over_the_wait_bound():
    adm = _measured(max_wait=2.0)
    first = adm.admit()
    first.add_items({"ed25519": 3000})  # alone: admitted, 3 s of work
    assert adm.estimated_wait() == pytest.approx(3.0)
    with pytest.raises(Overloaded) as exc:
        adm.admit()
    assert exc.value.retry_after == pytest.approx(1.0)  # max(retry_after, 3 - 2)
    assert adm.snapshot()["refused_by"]["wait"] == 1
    first.release()
    assert adm.estimated_wait() == 0.0
    adm.admit().release()  # nothing in flight: admitted again


def test_without_the_time_bound_a_new_ticket_meets_the_memory_bounds_only():
    # A WebSocket message arriving (app/api/ws_limits.py): over the wait it is admitted, the
    # route then refusing that one request; over a memory bound it is still refused.
    adm = _measured(max_wait=2.0)
    first = adm.admit(nbytes=MiB)
    first.add_items({"ed25519": 3000})  # 3 s of work in flight
    with pytest.raises(Overloaded):
        adm.admit()
    arriving = adm.admit(nbytes=1024, wait=False)
    assert adm.snapshot()["refused_by"]["wait"] == 1 and adm.snapshot()["bytes_in_flight"] == MiB + 1024
    with pytest.raises(Overloaded):
        adm.admit(nbytes=1 << 30, wait=False)
    assert adm.snapshot()["refused_by"]["bytes"] == 1
    arriving.release()
    first.release()


def test_a_request_whose_items_would_wait_too_long_is_refused_when_they_are_known():
    adm = _measured(max_wait=2.0)
    a = adm.admit()
    a.add_items({"ed25519": 1500})  # 1.5 s in flight: under the bound
    b = adm.admit()  # admitted before its items are known
    b.add_items({"ed25519": 5000})  # it waits 1.5 s, not its own 5 s: admitted
    with pytest.raises(Overloaded):
        adm.admit()  # 6.5 s in flight: the next is refused at once
    b.release()
    c = adm.admit()
    a.add_items({"ed25519": 1000})  # a's own growth is not a wait for a
    with pytest.raises(Overloaded):
        c.add_items({"ed25519": 10})  # 2.5 s ahead of c
    a.release()
    c.release()
    assert adm.snapshot()["work_in_flight"] == pytest.approx(0.0)


def test_the_time_bound_is_off_at_zero_and_the_size_bounds_stay():
    adm = _measured(max_wait=0.0)
    a = adm.admit()
    a.add_items({"ed25519": 10**5})  # 100 s of work
    adm.admit().release()
    adm2 = Admission(max_items=10, max_bytes=MiB, max_wait=100.0)
    held = adm2.admit(items=10)
    with pytest.raises(Overloaded):  # the item bound is full: refused before anything is read
        adm2.admit()
    held.release()


def test_one_request_cannot_grow_past_its_share_while_others_are_in_flight():
    adm = Admission(max_items=100, max_bytes=8 * MiB, max_share=0.5)
    big = adm.admit()
    big.add(nbytes=6 * MiB)  # alone: it may take more than its share
    other = adm.admit()
    with pytest.raises(Overloaded) as exc:
        big.add(nbytes=1)  # now someone else is in flight
    assert "share" in exc.value.message and adm.snapshot()["refused_by"]["share"] == 1
    other.add(nbytes=MiB)  # the other one still grows
    other.release()
    big.release()


def test_a_request_alone_is_cut_at_its_share_once_others_were_turned_away():
    clock = Clock()
    adm = Admission(max_items=100, max_bytes=8 * MiB, retry_after=1.0, max_share=0.5, clock=clock)
    hog = adm.admit()
    hog.add(nbytes=8 * MiB)  # alone, the whole bound
    with pytest.raises(Overloaded):
        adm.admit()  # the bound is full: refused
    with pytest.raises(Overloaded):
        hog.add(nbytes=1)  # someone was just turned away: no more for the hog
    clock.now += 5
    hog.add(nbytes=1)  # nobody asked since: it may go on alone
    hog.release()


async def _drive(adm: Admission, declared: int, chunks: list[bytes]) -> list[int]:
    """Send a POST /v1/verify declaring ``declared`` bytes through the middleware, its body in
    ``chunks``; the bytes in flight after each chunk was read."""
    seen: list[int] = []
    body = list(chunks)

    async def app(scope, receive, send):
        while True:
            msg = await receive()
            seen.append(adm.snapshot()["bytes_in_flight"])
            if not msg.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive():
        piece = body.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(body)}

    async def send(msg):
        pass

    scope = {"type": "http", "method": "POST", "path": "/v1/verify",
             "headers": [(b"content-length", str(declared).encode())]}
    await AdmissionControl(app, adm)(scope, receive, send)
    return seen


def test_a_declared_body_is_charged_as_it_arrives_not_as_declared():
    adm = Admission(max_items=100, max_bytes=256 * MiB)
    seen = asyncio.run(_drive(adm, 256 * MiB, [b"x" * 1000, b"y" * 24]))
    assert seen == [1000, 1024]  # never the 256 MiB it declared
    assert adm.snapshot()["bytes_in_flight"] == 0  # given back with the answer


def test_a_slow_client_declaring_the_whole_bound_does_not_lock_others_out():
    adm = Admission(max_items=100, max_bytes=256 * MiB)
    first_chunk_read = asyncio.Event()
    stall = asyncio.Event()

    async def slow_app(scope, receive, send):
        await receive()  # 64 KiB of its 256 MiB, then it stalls
        first_chunk_read.set()
        await stall.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def slow_receive():
        return {"type": "http.request", "body": b"z" * 65536, "more_body": True}

    async def nothing(msg):
        pass

    async def scenario() -> int:
        scope = {"type": "http", "method": "POST", "path": "/v1/verify/zap",
                 "headers": [(b"content-length", str(256 * MiB).encode())]}
        task = asyncio.create_task(AdmissionControl(slow_app, adm)(scope, slow_receive, nothing))
        await first_chunk_read.wait()
        admitted = 0
        for _ in range(50):  # others come and go while it stalls
            adm.admit(nbytes=1024).release()
            admitted += 1
        stall.set()
        await task
        return admitted

    assert asyncio.run(scenario()) == 50


def test_refusals_and_in_flight_work_reach_the_metrics():
    from types import SimpleNamespace

    adm = _measured(max_wait=0.5)
    a = adm.admit()
    a.add_items({"ed25519": 1000})
    before = ADMISSION_REFUSALS.labels("wait")._value.get()
    with pytest.raises(Overloaded):
        adm.admit()
    runtime = SimpleNamespace(engine=SimpleNamespace(routes={}, ready=True, backends=()), pool=None, store=None)
    refresh_gauges(runtime, adm)
    assert ADMISSION_REFUSALS.labels("wait")._value.get() == before + 1
    from app.api.metrics import ADMISSION_IN_FLIGHT, ADMISSION_WAIT
    assert ADMISSION_IN_FLIGHT.labels("items")._value.get() == 1000
    assert ADMISSION_WAIT._value.get() == pytest.approx(1.0)
    refresh_gauges(runtime, adm)  # counted once
    assert ADMISSION_REFUSALS.labels("wait")._value.get() == before + 1
    a.release()


def test_http_requests_whose_items_are_not_known_yet_count_as_the_average_request():
    """HTTP requests arriving together see each other before their bodies are read: each
    counts as the average request of late, at most max_wait / 8, until its items are known (at
    4x the sustainable rate, bodies parsed only to be refused cut the served rate to a third)."""
    adm = _measured(max_wait=2.0)
    first = adm.admit(provisional=True)
    assert first.work == 0.0  # nothing learned yet
    first.add_items({"ed25519": 200})  # 0.2 s: the average request now
    first.release()
    tickets = [adm.admit(provisional=True) for _ in range(11)]  # 0 .. 2.0 s ahead: admitted
    assert adm.estimated_wait() == pytest.approx(2.2)
    with pytest.raises(Overloaded):
        adm.admit(provisional=True)  # 2.2 s ahead: refused before anything of it is read
    tickets[0].add_items({"ed25519": 100})  # its own work replaces the average
    assert adm.estimated_wait() == pytest.approx(2.1)
    for t in tickets:
        t.release()
    assert adm.estimated_wait() == 0.0
    # One huge request does not make the next few look long: the estimate is capped.
    big = adm.admit(provisional=True)
    big.add_items({"ed25519": 20_000})  # 20 s
    big.release()
    assert adm.admit(provisional=True).work == pytest.approx(0.25)
    # Whole messages (WebSocket, ingest) get no estimate: pipelined small frames on an idle
    # server are never refused for the requests before them.
    frames = [adm.admit() for _ in range(50)]
    assert all(t.work == 0.0 for t in frames)
