"""Deadlines, the fair queue and the cost model of admission (app/engine/admission.py,
app/engine/fair_share.py, app/api/admission.py; docs/operations.md, "Load shedding"; issue 48):
a request waits while it can finish within its deadline and is refused (503, Retry-After from
the queue) only when it cannot, a request still queued at its deadline is answered rather than
worked on, clients are served in proportion to work, BLS aggregates cost per pairing, and a
queued request's body is not read until it is admitted."""

from __future__ import annotations

import asyncio

import pytest

from app.api.admission import AdmissionControl, client_of
from app.api.service import aggregate_units
from app.core.batch import AggregateItem
from app.core.errors import Overloaded, RequestError
from app.engine.admission import DEADLINE_HEADER, PAIRINGS, PRIOR_SECONDS, SLOTS, Admission
from app.engine.fair_share import FairShare


def _measured(**kw) -> Admission:
    """An admission whose cost model knows Ed25519 at 1 ms per item."""
    kw.setdefault("pipeline", 0.5)
    adm = Admission(max_items=10**6, max_bytes=1 << 30, retry_after=1.0, **kw)
    adm.rates.observe("ed25519", 1000, 1.0, end=1.5)  # 1,000 items (≥ min_items): taken at once
    return adm


def _run(coro):
    return asyncio.run(coro)


def test_a_request_that_cannot_finish_by_its_deadline_is_refused_with_retry_after_from_the_queue():
    async def scenario():
        adm = _measured(default_deadline=30.0)
        first = await adm.enter("peer:a", 30.0)
        first.add_items({"ed25519": 25_000})  # 25 s of work in flight for client a
        # a's next request counts as a's average (25 s): done in ~50 s, past 30 s.
        with pytest.raises(Overloaded) as exc:
            await adm.enter("peer:a", 30.0)
        assert adm.snapshot()["refused_by"]["deadline"] == 1
        assert exc.value.retry_after == pytest.approx(20.0, abs=0.05)  # 50 s estimated - 30 s deadline
        # With a deadline that fits it waits in the queue instead.
        waiting = asyncio.create_task(adm.enter("peer:a", 120.0))
        await asyncio.sleep(0.01)
        assert not waiting.done() and adm.snapshot()["queued"] == 1
        first.release()
        second = await asyncio.wait_for(waiting, 1.0)
        assert adm.snapshot()["queued"] == 0 and adm.snapshot()["requests_in_flight"] == 1
        second.release()
    _run(scenario())


def test_another_client_is_not_refused_for_a_heavy_clients_backlog():
    async def scenario():
        adm = _measured()
        heavy = await adm.enter("key:heavy", 300.0)
        heavy.add_items({"ed25519": 100_000})  # 100 s
        small = await adm.enter("key:small", 2.0)  # fair sharing: ~2 × its own work, not 100 s
        small.add_items({"ed25519": 4})
        small.release()
        heavy.release()
    _run(scenario())


def test_a_request_still_queued_at_its_deadline_is_answered_503_not_worked_on():
    async def scenario():
        adm = _measured()
        held = await adm.enter("peer:a", 30.0)
        held.add_items({"ed25519": 2_000})  # 2 s, over the pipeline: a's next one queues
        with pytest.raises(Overloaded) as exc:
            await adm.enter("peer:a", 2.5)  # 4 s estimated > 2.5: refused at once
        assert adm.snapshot()["refused_by"]["deadline"] == 1
        held.release()
        # An estimate that fits but a wait that does not (every slot held longer than
        # measured): queued, then answered at its deadline.
        adm = _measured()
        held = [adm.admit(client=f"peer:{i}") for i in range(SLOTS)]
        for t in held:
            t.add_items({"ed25519": 1})
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(Overloaded) as exc:
            await adm.enter("peer:a", 0.3)
        assert 0.25 <= asyncio.get_running_loop().time() - t0 < 2.0
        snap = adm.snapshot()
        assert snap["refused_by"]["expired"] == 1 and "deadline" in exc.value.message
        assert snap["queued"] == 0 and snap["requests_in_flight"] == SLOTS  # nothing of it stays
        assert exc.value.retry_after >= 1.0
        for t in held:
            t.release()
    _run(scenario())


def test_queued_requests_are_served_in_proportion_to_work_not_arrival():
    """Start-time fair queueing: client a queued three 1 s requests before b queued three
    0.01 s ones; b's start before a's second and third."""
    async def scenario():
        adm = _measured(pipeline=0.001)
        block = await adm.enter("peer:z", 300.0)
        block.add_items({"ed25519": 5_000})  # in flight, over the pipeline
        # z is in flight, so a and b (nothing in flight) could take fair slots: fill them.
        adm_slots = [await adm.enter(f"peer:filler{i}", 300.0) for i in range(7)]
        for t in adm_slots:
            t.add_items({"ed25519": 10})
        started: list[str] = []

        async def one(client: str, items: int):
            t = await adm.enter(client, 300.0)
            started.append(client)
            t.add_items({"ed25519": items})
            await asyncio.sleep(items * 0.0002)  # runs as long as its work says (0.2 s, 2 ms)
            t.release()

        adm._client_work["peer:a"] = 1.0
        adm._client_work["peer:b"] = 0.01
        tasks = [asyncio.create_task(one("peer:a", 1000)) for _ in range(3)]
        await asyncio.sleep(0.01)
        tasks += [asyncio.create_task(one("peer:b", 10)) for _ in range(3)]
        await asyncio.sleep(0.01)
        assert adm.snapshot()["queued"] == 6 and started == []
        for t in adm_slots:
            t.release()
        block.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 5.0)
        # a's first (tagged first) and b's beside it; b's others while a's first runs; then a's.
        assert started == ["peer:a", "peer:b", "peer:b", "peer:b", "peer:a", "peer:a"]
    _run(scenario())


def test_fair_share_tags_and_completion():
    fs = FairShare()
    assert fs.tag("a", 10.0) == 0.0 and fs.tag("a", 10.0) == 10.0  # a's second starts after its first
    assert fs.tag("b", 1.0) == 0.0  # b is not behind a's backlog
    fs.started(10.0)
    assert fs.tag("c", 1.0) == 10.0  # a newcomer starts at virtual time, not at 0
    fs.add("a", 20.0)
    fs.add("b", 1.0)
    # b's next 1 s request: b's 2 s, and at most as much of a's 20 s.
    assert fs.completion("b", 1.0) == pytest.approx(4.0)
    assert fs.completion("a", 5.0) == pytest.approx(26.0)
    fs.add("b", -1.0)
    assert fs.clients() == 1


def test_bls_aggregates_cost_per_pairing_not_per_item():
    one = AggregateItem("fast_aggregate", (b"k" * 48,), (b"m",), b"s" * 96)
    big = AggregateItem("aggregate", tuple(bytes([i % 256, i // 256]) * 24 for i in range(2048)),
                        tuple(b"msg%d" % i for i in range(2048)), b"s" * 96)
    assert aggregate_units([one]) == 1 + 1 + 1
    assert aggregate_units([big]) == 2048 + 2048 + 1
    assert aggregate_units([big] * 7) == 7 * 4097
    adm = _measured(default_deadline=120.0)  # a 54 s request needs a deadline past 54 s
    adm.rates.observe(PAIRINGS, 28_679, 54.0, end=100.0)  # one 7 × 2,048-key request: 54 s
    t = adm.admit()
    t.add_items({PAIRINGS: aggregate_units([one])})
    assert t.work == pytest.approx(3 * 54.0 / 28_679)
    t.release()
    t = adm.admit()
    t.add_items({PAIRINGS: aggregate_units([big] * 7)})
    assert t.work == pytest.approx(54.0)  # the same request, the same cost
    assert adm.snapshot()["items_in_flight"] == 0  # pairings are work, not items
    t.release()


def test_unmeasured_work_counts_a_prior_per_unit_so_a_cold_process_does_not_start_it_all():
    async def scenario():
        adm = Admission(max_items=10**6, max_bytes=1 << 30, pipeline=0.5)
        first = await adm.enter("peer:a", 300.0)
        assert first.work == pytest.approx(0.5) and first.provisional  # items unknown, no history
        first.add_items({PAIRINGS: 28_679})  # not measured yet: 2 ms a pairing
        assert first.work == pytest.approx(28_679 * PRIOR_SECONDS)
        second = asyncio.create_task(adm.enter("peer:a", 300.0))
        await asyncio.sleep(0.01)
        assert not second.done()  # the same client's next waits: a cold 50 s request is not free
        first.release()
        (await second).release()
    _run(scenario())


def test_the_deadline_header():
    adm = Admission(max_items=10, max_bytes=1 << 20, default_deadline=30.0, max_deadline=300.0)
    assert adm.deadline_seconds(None) == 30.0
    assert adm.deadline_seconds(b"12.5") == 12.5
    assert adm.deadline_seconds("9000") == 300.0  # capped
    assert adm.deadline_seconds("9" * 400) == 300.0  # too long to be finite, still a number: capped
    assert adm.deadline_seconds(" 1e+06 ") == 300.0 and adm.deadline_seconds("2.5e-1") == 0.25  # as %g writes
    for bad in (b"soon", b"-1", b"0", b"nan", b"inf", b"+3", b"1_0", b"", b"0x10", b"1e", b"."):
        with pytest.raises(RequestError) as exc:
            adm.deadline_seconds(bad)
        assert exc.value.field == DEADLINE_HEADER


def test_client_is_the_key_name_else_the_peer_host():
    assert client_of({"state": {"zapverify.key": "alice"}, "client": ("10.0.0.1", 5)}) == "key:alice"
    assert client_of({"client": ("10.0.0.1", 5)}) == client_of({"client": ("10.0.0.1", 6)}) == "peer:10.0.0.1"


def test_a_queued_requests_body_is_not_read_until_it_is_admitted():
    """The middleware: the second request of a client waits, its receive() untouched, while the
    first holds the pipeline; it is read once the first is answered."""
    async def scenario():
        adm = _measured(pipeline=0.5)
        reads: dict[str, int] = {"a": 0, "b": 0}
        answered = asyncio.Event()

        def receiver(name: str):
            async def receive():
                reads[name] += 1
                return {"type": "http.request", "body": b"x" * 100, "more_body": False}
            return receive

        async def app(scope, receive, send):
            await receive()
            ticket = scope["state"]["admission"]
            ticket.add_items({"ed25519": 2_000})  # 2 s: over the pipeline
            if scope["name"] == "a":
                await answered.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})

        async def send(msg):
            pass

        def scope(name: str, deadline: bytes = b"60"):
            return {"type": "http", "method": "POST", "path": "/v1/verify", "name": name,
                    "client": ("127.0.0.1", 1), "headers": [(DEADLINE_HEADER.encode(), deadline)]}

        mw = AdmissionControl(app, adm)
        a = asyncio.create_task(mw(scope("a"), receiver("a"), send))
        await asyncio.sleep(0.02)
        b = asyncio.create_task(mw(scope("b"), receiver("b"), send))
        await asyncio.sleep(0.05)
        assert reads == {"a": 1, "b": 0} and adm.snapshot()["queued"] == 1
        answered.set()
        await asyncio.wait_for(asyncio.gather(a, b), 2.0)
        assert reads == {"a": 1, "b": 1}
        assert adm.snapshot()["requests_in_flight"] == 0

        # A malformed deadline is a 4xx naming the header, its body never read.
        sent: list[dict] = []

        async def keep(msg):
            sent.append(msg)
        await mw(scope("c", b"later"), receiver("b"), keep)
        assert sent[0]["status"] == RequestError.status and DEADLINE_HEADER.encode() in sent[1]["body"]
        assert reads["b"] == 1
    _run(scenario())


def test_the_next_request_starts_when_the_work_in_flight_is_nearly_done_not_after():
    """Pipelining: a's second request starts once its first has less than ``pipeline`` seconds
    of estimated work left (its body is read while the first is verified), woken by a timer."""
    async def scenario():
        adm = _measured(pipeline=0.1)
        first = await adm.enter("peer:a", 30.0)
        first.add_items({"ed25519": 300})  # 0.3 s
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        second = await asyncio.wait_for(adm.enter("peer:a", 30.0), 2.0)
        waited = loop.time() - t0
        assert 0.15 <= waited <= 0.6 and not first.released  # ~0.2 s: 0.3 s less the 0.1 s pipeline
        second.release()
        first.release()
    _run(scenario())


def test_a_full_queue_refuses_at_once_and_cancelled_waiters_leave_nothing():
    async def scenario():
        adm = _measured(max_queued=2)
        held = await adm.enter("peer:a", 300.0)
        held.add_items({"ed25519": 5_000})  # 5 s
        waiting = [asyncio.create_task(adm.enter("peer:a", 300.0)) for _ in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(Overloaded):
            await adm.enter("peer:a", 300.0)
        assert adm.snapshot()["refused_by"]["queue"] == 1
        for t in waiting:  # the clients went away
            t.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        snap = adm.snapshot()
        assert snap["queued"] == 0 and snap["requests_in_flight"] == 1
        assert adm.share.backlog("peer:a") == pytest.approx(5.0)
        held.release()
        assert adm.share.backlog("peer:a") == 0.0 and adm.snapshot()["work_in_flight"] == 0.0
    _run(scenario())


def test_requests_still_uploading_hold_no_slot():
    """Eight slow uploads (admitted, bodies not read to the end, items unknown) do not lock the
    others out: a slot is held only once a request's work is known."""
    async def scenario():
        adm = _measured()
        uploading = [await adm.enter(f"peer:slow{i}", 30.0) for i in range(SLOTS)]
        other = await asyncio.wait_for(adm.enter("peer:other", 30.0), 1.0)  # not queued behind them
        other.release()
        for t in uploading:
            t.add_items({"ed25519": 1000})  # now their work is known: 1 s each, every slot held
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(adm.enter("peer:late", 30.0), 0.2)  # queued: no slot free
        for t in uploading:
            t.release()
    _run(scenario())


def test_work_already_done_is_not_counted_ahead_of_a_new_request():
    clock_now = [100.0]
    adm = Admission(max_items=10**6, max_bytes=1 << 30, clock=lambda: clock_now[0])
    adm.rates.observe("ed25519", 1000, 1.0, end=1.5)
    t = adm.admit(client="peer:a")
    t.add_items({"ed25519": 20_000})  # 20 s
    # A new client's average request (20 s now) beside it: its own 20 s and as much of a's.
    assert adm.snapshot()["estimated_wait_seconds"] == pytest.approx(40.0, abs=0.1)
    clock_now[0] += 15  # 15 s of a's done: 5 s of it left ahead
    assert adm.snapshot()["estimated_wait_seconds"] == pytest.approx(25.0, abs=0.1)
    t.release()


def test_alone_a_request_is_refused_only_when_its_measured_pairings_are_past_its_deadline():
    async def scenario():
        adm = _measured()
        adm.rates.observe(PAIRINGS, 28_679, 54.0, marginal=False)
        t = await adm.enter("peer:a", 30.0)  # alone: admitted on a guess
        with pytest.raises(Overloaded) as exc:
            t.add_items({PAIRINGS: 28_679})  # measured: 54 s of its own, past its 30 s
        assert "longer x-zapverify-deadline" in exc.value.message
        t.release()
        t = await adm.enter("peer:a", 5.0)
        t.add_items({"ed25519": 10_000})  # 10 s at a per-item rate: alone, served
        t.release()
        t = await adm.enter("peer:a", 5.0)
        t.add_items({"slh-dsa-sha2-256s": 10_000})  # unmeasured (the prior says 20 s): alone, served
        t.release()
    _run(scenario())
