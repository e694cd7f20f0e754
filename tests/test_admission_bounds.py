"""Admission by what has arrived (app/engine/admission.py, app/api/admission.py;
docs/operations.md, "Load shedding"; issue 37): a request that declares a large body holds only
what it has sent, one request cannot hold the byte bound while others are turned away, and the
cost model measures each kind's marginal seconds.  Deadlines and the fair queue:
tests/test_admission_queue.py."""

from __future__ import annotations

import asyncio

import pytest

from app.api.admission import AdmissionControl
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
    assert rates.per_item("ed25519") is None and rates.seconds({"ed25519": 100}) is None
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
    assert rates.seconds({"ed25519": 2000}) == pytest.approx(1.0)
    assert rates.seconds({"ed25519": 2000, "unmeasured": 10**6}) is None  # unknown, not free
    # A first batch as large as min_items is no cold start: taken at once (a 28,000-pairing
    # BLS aggregate request must count from its first answer on).
    big = ServiceRates(alpha=1.0, clock=clock, min_items=256)
    big.observe("bls12-381-pairing", 28_000, 54.0, end=100.0)
    assert big.per_item("bls12-381-pairing") == pytest.approx(54.0 / 28_000)


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




def test_work_observed_whole_by_its_route_is_not_cut_by_the_short_batches_beside_it():
    """A 54 s aggregate request ran beside small batches that ended every 0.2 s: its marginal
    time would be 0.2 s.  Observed with ``marginal=False`` it is its 54 s."""
    clock = Clock()
    rates = ServiceRates(alpha=1.0, clock=clock)
    for k in range(270):
        rates.observe("ed25519", 4, 0.01, end=1000.0 + 0.2 * k)
    rates.observe("bls12-381-pairing", 28_679, 54.0, end=1000.0 + 0.2 * 269 + 0.1, marginal=False)
    assert rates.per_item("bls12-381-pairing") == pytest.approx(54.0 / 28_679)
    rates.observe("bls12-381-pairing", 28_679, 54.0, end=1000.0 + 0.2 * 269 + 0.2)
    assert rates.per_item("bls12-381-pairing") < 1e-4  # what the marginal rule would have taken
