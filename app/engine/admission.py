"""Admission control: the items, bytes and estimated work of the verify requests in flight in
one process, their bounds, and the fair queue in front of them (docs/operations.md, "Load
shedding").  Shared by the HTTP and WebSocket routes (app/api/admission.py, which also has
the ASGI middleware) and the NIC ingest listeners.

**One cost unit.**  Every request is charged its estimated seconds of this process's work
(:class:`ServiceRates`): its items times each scheme's measured seconds per item, a BLS
aggregate request's pairings (keys + distinct messages + 1 per item) times the measured
seconds per pairing, a proof read its measured seconds.  Admission, the queue order, the
estimated completion, ``Retry-After`` and the metrics all use it.  A kind of work not measured
yet counts :data:`PRIOR_SECONDS` per unit (a cold process must not take three 50 s requests
for free ones, nor a 4-item one for a heavy one).

**Deadlines, not a fixed wait.**  Every HTTP verify request has a deadline (the client's
``X-Zapverify-Deadline`` header, else ``default_deadline``, at most ``max_deadline``).  A new
request waits in a queue, its body unread (TCP back-pressure holds it in the client), while
its estimated completion (:meth:`app.engine.fair_share.FairShare.completion`: fair sharing
between clients) is within its deadline.  It is refused (:class:`app.core.errors.Overloaded`,
503 with ``Retry-After`` computed from the queue) only when it cannot finish in time
(``deadline``), when the queue is full (``queue``), or when it is still queued at its deadline,
or so close to it that its own work would pass it (``expired``): then it is answered rather
than worked on.  Until its items are known a request
counts as its client's average request of late (an exponentially weighted mean), else the
process's average request at most ``pipeline`` seconds (one heavy client must not make every
newcomer look heavy), else ``pipeline`` seconds.

**What starts.**  Queued requests are taken in start-tag order (fair queueing between
clients: the API key's name, else the peer address); one starts when nothing is in flight,
or when the item and byte bounds are not full, fewer than :data:`SLOTS` requests are in
flight with their work known (one still uploading holds no slot), and its client's work left
in flight (each of its requests' estimate less the time since it started) is under
``pipeline`` seconds — so a client's next body is read and parsed
while its last one is verified (a timer wakes the queue when that is due), a heavy client has
one request running at a time, and another client's small requests run beside it instead of
behind it.

**Bounds** (refused with reasons ``items``, ``bytes``, ``share``): a charge that takes the
items or bytes in flight past their bound, or one request past ``max_share`` of the byte bound
while another request is in flight or one was refused in the last ``retry_after`` seconds.  A
ticket alone in flight is always admitted, so a request larger than a bound is served when the
process is idle.

WebSocket messages and ingest frames arrive whole and are not queued (:meth:`Admission.admit`):
they are admitted at once within the bounds, or refused when their estimated completion is
past ``default_deadline``.  Thread-safe: ingest receive threads, the shadow checker's stats and
the event loop share one :class:`Admission`; a waiter is woken on its own event loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.batch import AGGREGATE_LABELS
from app.core.deadline import DEADLINE_HEADER
from app.core.errors import Overloaded, RequestError
from app.engine.fair_share import FairShare

#: Why a request was refused (the ``reason`` of :attr:`AdmissionStats.refused_by` and of the
#: ``zapverify_admission_refusals_total`` metric): a bound, its deadline could not be met, the
#: queue was full, or it was still queued at its deadline.
REASONS = ("items", "bytes", "share", "deadline", "queue", "expired")
#: The cost kind of a BLS aggregate request, counted in pairings (keys + distinct messages + 1
#: per item): an item of 2,048 keys costs about 2,000 times one of one key.
PAIRINGS = "bls12-381-pairing"
#: Seconds per unit of a kind not measured yet: about one pairing, or one verification of the
#: slowest schemes on one core.  A cold process thus takes a 28,679-pairing aggregate request
#: for the minute it is, and a 4-item request for milliseconds.
PRIOR_SECONDS = 0.002
#: The cost kind of an inclusion proof read (GET /v1/receipts/{id}/proof/{index}).
PROOFS = "receipt-proof"
#: Requests that may be in flight at once (module doc, "What starts"); the bounds in items and
#: bytes apply too.
SLOTS = 8


@dataclass
class AdmissionStats:
    items_in_flight: int = 0
    bytes_in_flight: int = 0
    requests_in_flight: int = 0
    #: Estimated seconds of work in flight (the sum of the tickets' costs).
    work_in_flight: float = 0.0
    admitted_total: int = 0
    #: Overload refusals of every reason: the one count the metrics, the dashboard and
    #: /v1/stats show (docs/operations.md, "Load shedding").
    refused_total: int = 0
    refused_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    items_peak: int = 0
    bytes_peak: int = 0
    #: Requests waiting in the queue now, and their estimated work.
    queued: int = 0
    queued_work: float = 0.0
    queued_peak: int = 0
    #: Seconds admitted requests waited in the queue: their sum, count and the largest.
    wait_seconds_total: float = 0.0
    waited_total: int = 0
    wait_seconds_max: float = 0.0
    #: Admitted requests answered after their deadline.
    deadline_missed_total: int = 0


class ServiceRates:
    """Seconds of verify work per item, per scheme, measured from the batches this process
    verified (a :class:`app.engine.stats.StatsListener`: subscribe it to the engine's stats).

    A batch's own verify time is no measure under load: batches queue behind each other on
    the backends, so a batch that waited 3 s behind others and then ran 0.1 s reports 3.1 s.
    What is taken instead is the time the process spent on it that it spent on no other
    batch: its end minus the later of its start and the previous batch's end (the marginal
    service time; for batches served one after another this is exactly each one's run time,
    for batches served side by side it shares their time between them, so the sum over a busy
    spell is its length).  Per scheme, an exponentially weighted sum of those seconds over
    an exponentially weighted sum of items (``alpha`` per batch) gives seconds per item.

    A scheme's first batch after start is not taken when it is smaller than ``min_items`` (a
    cold process: worker pools starting, caches empty; one took 80 ms for 2 items, 400 times
    the warm cost), and until ``min_items`` items of a scheme have been measured its cost is
    unknown (:meth:`per_item` is None; admission then counts the request as ``pipeline``
    seconds).  A first batch of ``min_items`` or more is taken: a BLS aggregate request of
    28,000 pairings must count from its first answer on, or the next three are started
    together.

    Kinds other than schemes share the model: :data:`PAIRINGS` (observed by the BLS aggregate
    route, per pairing) and :data:`PROOFS` (per proof read).  The engine's per-item stats of
    aggregate items (:data:`app.core.batch.AGGREGATE_LABELS`) are not taken: an item of one
    key and one of 2,048 are not the same work.
    """

    def __init__(self, alpha: float = 0.2, clock: Callable[[], float] = time.monotonic, *, min_items: int = 256):
        self.alpha, self._clock, self.min_items = alpha, clock, min_items
        self._lock = threading.Lock()
        self._last_end = -math.inf
        self._weighted: dict[str, tuple[float, float]] = {}  # scheme -> (seconds, items)
        self._seen: dict[str, int] = {}  # scheme -> items measured (the first batch not counted)

    def observe(self, scheme: str, items: int, seconds: float, *, end: float | None = None,
                marginal: bool = True) -> None:
        """One verified batch of ``items`` of ``scheme`` that took ``seconds`` (wall clock),
        ending at ``end`` (the clock's now by default).  ``marginal=False``: take ``seconds``
        as they are and leave the batches' timeline alone — for work observed whole by its
        route (an aggregate request, a proof read), whose time overlaps many short batches of
        other kinds: its marginal time would be only what followed the last of them."""
        if items <= 0 or seconds < 0:
            return
        end = self._clock() if end is None else end
        with self._lock:
            if marginal:
                spent = max(0.0, end - max(end - seconds, self._last_end))
                self._last_end = max(self._last_end, end)
            else:
                spent = seconds
            if scheme not in self._seen and items < self.min_items:  # the cold first batch
                self._seen[scheme] = 0
                return
            self._seen.setdefault(scheme, 0)
            self._seen[scheme] += items
            s, n = self._weighted.get(scheme, (0.0, 0.0))
            a = self.alpha if scheme in self._weighted else 1.0
            self._weighted[scheme] = ((1 - a) * s + a * spent, (1 - a) * n + a * items)

    def per_item(self, scheme: str) -> float | None:
        """Seconds of work per item of ``scheme``, or None until ``min_items`` were measured."""
        with self._lock:
            s, n = self._weighted.get(scheme, (0.0, 0.0))
            seen = self._seen.get(scheme, 0)
        return s / n if n > 0 and seen >= self._min_for(scheme) else None

    def _min_for(self, kind: str) -> int:
        # Proof reads are alike and cheap: a few measure them.
        return min(self.min_items, 8) if kind == PROOFS else self.min_items

    def seconds(self, counts: Mapping[str, int]) -> float | None:
        """Estimated seconds of work for ``counts`` (kind -> units), or None when a kind with
        units is not measured yet."""
        total = 0.0
        for s, n in counts.items():
            if n <= 0:
                continue
            per = self.per_item(s)
            if per is None:
                return None
            total += n * per
        return total

    def snapshot(self) -> dict[str, float]:
        """Scheme id -> items per second (the inverse of :meth:`per_item`), measured schemes only."""
        with self._lock:
            return {s: (n / sec if sec > 0 else math.inf) for s, (sec, n) in self._weighted.items()
                    if n > 0 and self._seen.get(s, 0) >= self._min_for(s)}

    # StatsListener: only batches matter here.
    def batch(self, scheme: str, backend: str, items: int, valid: int, seconds: float) -> None:
        if scheme not in _AGGREGATE_KINDS:  # those are observed per pairing (class doc)
            self.observe(scheme, items, seconds)


_AGGREGATE_KINDS = frozenset(AGGREGATE_LABELS.values())


@dataclass(eq=False)
class _Waiter:
    """A request in the queue: its client, estimated work, start tag and deadline."""

    client: str
    work: float
    tag: float
    seq: int
    deadline: float
    arrived: float
    future: asyncio.Future
    #: ``queued`` → ``started`` (charged; :attr:`ticket` is its), ``late`` (too close to its
    #: deadline to finish: refused when it wakes) or ``gone`` (timed out, cancelled).
    state: str = "queued"
    ticket: Ticket | None = None

    def __lt__(self, other: _Waiter) -> bool:
        return (self.tag, self.seq) < (other.tag, other.seq)


#: What :meth:`Admission.deadline_seconds` takes: digits with an optional fraction and exponent.
_DECIMAL = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", re.ASCII)


class Admission:
    """The items, bytes and work in flight in this process, their bounds and the fair queue
    in front of them (module doc).

    Args:
        max_items: items in flight beyond which a charge is refused.
        max_bytes: bytes in flight beyond which a charge is refused.
        retry_after: seconds, the least ``Retry-After`` of a refusal.
        default_deadline: seconds, the deadline of a request that sends none.
        max_deadline: seconds, the longest deadline a client may ask for (and the most a
            ``Retry-After`` says).
        pipeline: seconds of work in flight up to which queued requests start (module doc).
        max_queued: requests that may wait in the queue; one more is refused (``queue``).
        max_share: fraction (0, 1] of ``max_bytes`` one request may hold while others wait.
        rates: the cost model (a new :class:`ServiceRates` by default).
    """

    def __init__(self, max_items: int, max_bytes: int, retry_after: float = 1.0, *,
                 default_deadline: float = 30.0, max_deadline: float = 300.0, pipeline: float = 0.5,
                 max_queued: int = 1024, max_share: float = 0.5, rates: ServiceRates | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if not 0 < max_share <= 1:
            raise ValueError(f"max_share must be in (0, 1], not {max_share}")
        if not 0 < default_deadline <= max_deadline:
            raise ValueError(f"need 0 < default_deadline ({default_deadline}) <= max_deadline ({max_deadline})")
        self.max_items, self.max_bytes, self.retry_after = max_items, max_bytes, retry_after
        self.default_deadline, self.max_deadline = default_deadline, max_deadline
        self.pipeline, self.max_queued, self.max_share = pipeline, max_queued, max_share
        self.rates = rates if rates is not None else ServiceRates()
        self.stats = AdmissionStats()
        self.share = FairShare()
        self._clock = clock
        self._last_refusal = -math.inf
        self._queue: list[_Waiter] = []
        self._seq = itertools.count()
        #: Clients -> requests in flight (for "its client has nothing in flight").
        self._client_flight: dict[str, int] = {}
        #: Estimated work of a request whose items are not known yet: per client and overall
        #: (exponentially weighted means; clients bounded like FairShare's).
        self._client_work: dict[str, float] = {}
        self._average_work = 0.0
        #: The tickets in flight (for the work left: :meth:`_remaining`), and when the queue's
        #: wake-up timer (:meth:`_arm`) is due.
        self._flight: set[Ticket] = set()
        self._timer_at = -math.inf
        self._lock = threading.Lock()

    #: Weight of the newest request in the average request's work.
    AVERAGE_ALPHA = 0.2

    # ------------------------------------------------------------------ deadlines
    def deadline_seconds(self, header: str | bytes | None) -> float:
        """The deadline, in seconds from now, of a request that sent ``header`` (the
        :data:`DEADLINE_HEADER` value, or None): the server default when absent, at most
        ``max_deadline``.  Raises :class:`app.core.errors.RequestError` (4xx naming the header)
        for a value that is not a positive decimal number (``30``, ``2.5``, ``1e+06`` as the
        client's ``%g`` writes it; no sign, ``_``, ``nan`` or ``inf``)."""
        if header is None:
            return self.default_deadline
        text = (header.decode("latin-1") if isinstance(header, bytes) else header).strip()
        value = float(text) if _DECIMAL.fullmatch(text) else 0.0  # a number too long to be finite: inf
        if not value > 0:
            raise RequestError(f"{DEADLINE_HEADER} must be a positive decimal number of seconds (such as 30 or "
                               f"2.5), not {text[:40]!r}", field=DEADLINE_HEADER)
        return min(value, self.max_deadline)

    # ------------------------------------------------------------------ the queue
    async def enter(self, client: str = "", deadline: float | None = None) -> Ticket:
        """Wait for admission: a new ticket of ``client``, started once the fair queue lets it
        (module doc), its request's body not yet read.  ``deadline``: seconds from now
        (:meth:`deadline_seconds`).  Raises :class:`Overloaded` when its estimated completion
        is past its deadline, the queue is full, or it is still queued at its deadline."""
        now = self._clock()
        deadline = self.default_deadline if deadline is None else deadline
        loop = asyncio.get_running_loop()
        with self._lock:
            work = self._provisional(client)
            self._check_deadline(client, work, deadline)
            if len(self._queue) >= self.max_queued:
                raise self._refuse("queue", f"{len(self._queue)} requests are queued, the most this process "
                                   f"holds {self._where()}; retry later", self._retry_for(client, work, 0.0))
            tag = self.share.tag(client, work)
            waiter = _Waiter(client, work, tag, next(self._seq), now + deadline, now, loop.create_future())
            if not self._queue and self._may_start(waiter):
                return self._start(waiter)
            heapq.heappush(self._queue, waiter)
            self.share.add(client, work)
            s = self.stats
            s.queued += 1
            s.queued_work += work
            s.queued_peak = max(s.queued_peak, s.queued)
            self._dispatch()  # it may start beside others even behind the head
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout=max(0.0, waiter.deadline - self._clock()))
        except TimeoutError:
            with self._lock:
                if waiter.state == "queued":
                    self._unqueue(waiter)
                    raise self._refuse("expired", f"still queued at its deadline, {deadline:g} s after it "
                                       f"arrived {self._where()}; retry later",
                                       self._retry_for(client, work, 0.0)) from None
        except BaseException:  # the client went away (cancelled): nothing of it stays
            with self._lock:
                if waiter.state == "queued":
                    self._unqueue(waiter)
                    waiter.state = "gone"
            if waiter.ticket is not None:
                waiter.ticket.release()
            raise
        if waiter.state == "late":
            with self._lock:
                raise self._refuse("expired", f"queued until too close to its deadline ({deadline:g} s) to finish "
                                   f"its ~{work:.2f} s of work {self._where()}; retry later",
                                   self._retry_for(client, work, 0.0))
        assert waiter.ticket is not None
        return waiter.ticket

    def _unqueue(self, waiter: _Waiter) -> None:
        """Take a waiter that will not start out of the queue (under the lock)."""
        waiter.state = "gone"
        self._queue.remove(waiter)
        heapq.heapify(self._queue)
        self.share.add(waiter.client, -waiter.work)
        self.stats.queued -= 1
        self.stats.queued_work = max(0.0, self.stats.queued_work - waiter.work)
        self._dispatch()  # a gone head may have held others back

    def _may_start(self, w: _Waiter) -> bool:
        """The rule of "What starts" (module doc), under the lock."""
        s = self.stats
        if s.requests_in_flight == 0:
            return True
        if s.items_in_flight >= self.max_items or s.bytes_in_flight >= self.max_bytes:
            return False
        return self._working() < SLOTS and self._remaining(w.client) < self.pipeline

    def _working(self) -> int:
        """Requests in flight whose work is known (their bodies read): what :data:`SLOTS`
        bounds.  One still uploading holds no slot — its bytes are bounded, its time by the
        body's read deadline — so slow uploads cannot lock the others out."""
        return sum(1 for t in self._flight if not t.provisional)

    def _done(self) -> dict[str, float]:
        """Per client, the work of its requests in flight already done (each one's estimate,
        at most, for the time it has run): not ahead of anyone any more."""
        now, out = self._clock(), dict[str, float]()
        for t in self._flight:
            out[t.client] = out.get(t.client, 0.0) + min(t.work, max(0.0, now - t.started))
        return out

    def _remaining(self, client: str) -> float:
        """Estimated seconds of ``client``'s work left in flight: each of its tickets' work
        (provisional until its items are known) less the time since it started."""
        now = self._clock()
        return sum(max(0.0, t.work - (now - t.started)) for t in self._flight if t.client == client)

    def _arm(self) -> None:
        """With requests queued behind work in flight, wake the queue when that work is
        estimated to be within ``pipeline`` of done (under the lock): the next body is read and
        parsed while the last one is verified, not after."""
        if not self._queue or not self._flight or self._working() >= SLOTS:
            return  # nothing to wait for, or a slot must free first (a release dispatches)
        # Each ticket's part shrinks 1 s a second, at least: the soonest client due.
        delay = min(self._remaining(c) for c in {w.client for w in self._queue}) - self.pipeline
        if delay <= 0 or delay > self.max_deadline:
            return
        loop = self._queue[0].future.get_loop()
        when = self._clock() + delay
        if self._timer_at <= when and self._timer_at > self._clock():
            return  # one is armed sooner
        self._timer_at = when
        loop.call_soon_threadsafe(loop.call_later, delay + 0.001, self._on_timer)

    def _on_timer(self) -> None:
        with self._lock:
            self._dispatch()

    def _start(self, w: _Waiter, *, queued: bool = False) -> Ticket:
        """Charge a waiter's ticket and start it (under the lock)."""
        ticket = Ticket(self, w.client, w.deadline)
        self._charge(ticket, 0, 0, 0.0, new=True)  # within the bounds: _may_start checked them
        self._flight.add(ticket)
        ticket.work = w.work  # the provisional work; already in the client's backlog when queued
        ticket.provisional = True
        self.stats.work_in_flight += w.work
        if not queued:
            self.share.add(w.client, w.work)
        self.share.started(w.tag)
        self._client_flight[w.client] = self._client_flight.get(w.client, 0) + 1
        waited = self._clock() - w.arrived
        s = self.stats
        s.waited_total += 1
        s.wait_seconds_total += waited
        s.wait_seconds_max = max(s.wait_seconds_max, waited)
        w.state, w.ticket = "started", ticket
        return ticket

    def _dispatch(self) -> None:
        """Start the queued requests that may start, in start-tag order (under the lock)."""
        if not self._queue:
            return
        now = self._clock()
        for w in sorted(self._queue):
            late = now + w.work > w.deadline  # it could no longer finish in time: answered, not started
            if w.state != "queued" or not (late or self._may_start(w)):
                continue
            self._queue.remove(w)
            self.stats.queued -= 1
            self.stats.queued_work = max(0.0, self.stats.queued_work - w.work)
            if late:
                w.state = "late"
                self.share.add(w.client, -w.work)
            else:
                self._start(w, queued=True)
            w.future.get_loop().call_soon_threadsafe(_wake, w.future)
        heapq.heapify(self._queue)
        self._arm()

    # ------------------------------------------------------------------ estimates
    def _provisional(self, client: str) -> float:
        """The work of a request of ``client`` whose items are not known yet (module doc)."""
        known = self._client_work.get(client)
        if known is not None:
            return known
        # A new client: the process's average request, at most the pipeline (one heavy client
        # must not make every newcomer look heavy), or the pipeline before anything is known.
        return min(self._average_work, self.pipeline) if self._average_work > 0 else self.pipeline

    def _learn(self, client: str, work: float) -> None:
        """One request's work, once its items are known (under the lock)."""
        old = self._client_work.pop(client, None)
        self._client_work[client] = work if old is None else (1 - self.AVERAGE_ALPHA) * old + self.AVERAGE_ALPHA * work
        if len(self._client_work) > self.share.max_clients:
            del self._client_work[next(iter(self._client_work))]
        a = self.AVERAGE_ALPHA if self._average_work > 0 else 1.0
        self._average_work = (1 - a) * self._average_work + a * work

    def _cost(self, counts: Mapping[str, int]) -> tuple[float, bool]:
        """(estimated seconds, measured) of ``counts``; a kind not measured yet counts
        :data:`PRIOR_SECONDS` per unit."""
        seconds = self.rates.seconds(counts)
        if seconds is not None:
            return seconds, True
        return sum(n * (self.rates.per_item(k) or PRIOR_SECONDS) for k, n in counts.items() if n > 0), False

    def _check_deadline(self, client: str, work: float, deadline: float, *, included: bool = False,
                        alone: bool | None = None) -> None:
        """Refuse (``deadline``) a request whose estimated completion is past its deadline;
        ``alone`` (default: nothing else in flight or queued) exempts it (under the lock)."""
        if alone is None:
            alone = self.stats.requests_in_flight == 0 and not self._queue
        if alone:
            return
        done = self.share.completion(client, work, included=included, done=self._done())
        if done > deadline:
            hint = (f"; its own work alone, ~{work:.1f} s, is over it: send a longer {DEADLINE_HEADER} "
                    f"(at most {self.max_deadline:g} s) or a smaller request" if work > deadline else "")
            raise self._refuse("deadline", f"estimated to finish in {done:.2f} s, after its deadline "
                               f"({deadline:g} s){hint} {self._where()}; retry later",
                               self._retry_for(client, work, deadline, included=included))

    def _retry_for(self, client: str, work: float, deadline: float, *, included: bool = False) -> float:
        """``Retry-After`` from the queue: the seconds until the work ahead has drained enough
        for this request to finish within ``deadline`` (at least ``retry_after``, at most
        ``max_deadline``)."""
        excess = self.share.completion(client, work, included=included, done=self._done()) - deadline
        return min(self.max_deadline, max(self.retry_after, excess))

    def estimated_wait(self) -> float:
        """Seconds a new request of a new client with the average request's work is estimated
        to take to finish (the HPA's signal, ``zapverify_admission_estimated_wait_seconds``)."""
        with self._lock:
            return self.share.completion("\0new", self._average_work, done=self._done())

    def _where(self) -> str:
        """What is in flight and the bounds, for a refusal's message."""
        s = self.stats
        return (f"({s.requests_in_flight} requests, {s.items_in_flight} items, {s.bytes_in_flight} bytes, "
                f"~{s.work_in_flight:.2f} s of work in flight, {s.queued} queued; bounds {self.max_items} items, "
                f"{self.max_bytes} bytes)")

    def _refuse(self, reason: str, message: str, retry_after: float | None = None) -> Overloaded:
        s = self.stats
        s.refused_total += 1
        s.refused_by[reason] += 1
        self._last_refusal = self._clock()
        return Overloaded(message, retry_after=retry_after or self.retry_after, field="admission")

    # ------------------------------------------------------------------ immediate admission
    def admit(self, nbytes: int = 0, items: int = 0, *, client: str = "") -> Ticket:
        """A new ticket charged ``nbytes`` bytes and ``items`` items at once, never queued:
        WebSocket messages, ingest frames and proof reads.  Raises :class:`Overloaded` beyond
        a bound; :meth:`Ticket.add_items` refuses it when it cannot finish within
        ``default_deadline``."""
        ticket = Ticket(self, client, self._clock() + self.default_deadline)
        with self._lock:
            self._charge(ticket, nbytes, items, 0.0, new=True)
            self._flight.add(ticket)
            self._client_flight[client] = self._client_flight.get(client, 0) + 1
        return ticket

    def _charge(self, ticket: Ticket, nbytes: int, items: int, work: float, *, new: bool = False) -> None:
        s = self.stats
        # Alone in flight (this ticket's own earlier charges aside): always admitted.
        others = s.requests_in_flight - (0 if new else 1)
        if others > 0:
            # A new request finds a bound already full, or a charge would take it past one.
            if s.items_in_flight + items > self.max_items or (new and s.items_in_flight >= self.max_items):
                raise self._refuse("items", f"over the admission bound {self._where()}; retry later")
            if s.bytes_in_flight + nbytes > self.max_bytes or (new and s.bytes_in_flight >= self.max_bytes):
                raise self._refuse("bytes", f"over the admission bound {self._where()}; retry later")
        # A request that grows past its share while others are in flight or were just turned away.
        contended = others > 0 or (not new and self._clock() - self._last_refusal < self.retry_after)
        if nbytes > 0 and contended and ticket.nbytes + nbytes > self.max_share * self.max_bytes:
            raise self._refuse("share", f"this request would hold {ticket.nbytes + nbytes} bytes, over its "
                               f"share, {self.max_share:g} of the {self.max_bytes}-byte admission bound, while "
                               "others wait; retry later")
        if new:
            s.requests_in_flight += 1
            s.admitted_total += 1
        s.items_in_flight += items
        s.bytes_in_flight += nbytes
        s.work_in_flight += work
        s.items_peak = max(s.items_peak, s.items_in_flight)
        s.bytes_peak = max(s.bytes_peak, s.bytes_in_flight)
        ticket.items += items
        ticket.nbytes += nbytes
        ticket.work += work

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            s = self.stats
            return {**s.__dict__, "refused_by": dict(s.refused_by),
                    "max_items": self.max_items, "max_bytes": self.max_bytes, "max_share": self.max_share,
                    "default_deadline": self.default_deadline, "max_deadline": self.max_deadline,
                    "pipeline": self.pipeline, "max_queued": self.max_queued,
                    "clients_busy": self.share.clients(),
                    "estimated_wait_seconds": round(self.share.completion("\0new", self._average_work,
                                                                          done=self._done()), 6),
                    "items_per_second": {k: round(v, 1) for k, v in self.rates.snapshot().items()}}


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class Ticket:
    """One admitted request's charge; :meth:`add` and :meth:`add_items` charge more,
    :meth:`release` gives it all back.

    Attributes:
        client: whose request (the fair queue's client).
        deadline: when it should be answered (the admission clock's seconds).
        work: its estimated seconds of work (provisional until :meth:`add_items`).
    """

    def __init__(self, admission: Admission, client: str = "", deadline: float = math.inf):
        self.admission = admission
        self.client, self.deadline = client, deadline
        self.items = self.nbytes = 0
        self.work = 0.0
        #: Its work is the client's average request's, not its own yet (replaced by add_items).
        self.provisional = False
        #: When its work started (the admission clock's seconds; again when its items are known).
        self.started = admission._clock()
        self.released = False

    def add(self, nbytes: int = 0, items: int = 0) -> None:
        """Charge ``nbytes`` and ``items`` more; raises :class:`Overloaded` beyond the bounds."""
        if self.released:
            return
        with self.admission._lock:
            self.admission._charge(self, nbytes, items, 0.0)

    def add_items(self, counts: Mapping[str, int]) -> None:
        """Charge the work of a request now that it is known (kind -> units: a scheme id ->
        items, :data:`PAIRINGS` -> pairings, :data:`PROOFS` -> reads); raises
        :class:`Overloaded` beyond the item bound, or when it is now estimated to finish past
        its deadline while others are in flight."""
        if self.released:
            return
        adm = self.admission
        work, measured = adm._cost(counts)
        items = sum(n for k, n in counts.items() if k not in (PAIRINGS, PROOFS))
        with adm._lock:
            if measured:
                adm._learn(self.client, work)  # refused or not, it is what such a request costs
            delta = work - (self.work if self.provisional else 0.0)
            adm._charge(self, 0, items, delta)
            adm.share.add(self.client, delta)
            self.provisional = False
            self.started = adm._clock()
            left = self.deadline - adm._clock()
            # Alone, a request is refused only on an estimate it cannot miss by much: measured
            # pairings (an aggregate request's cost is its pairings).  Per-item rates learnt
            # from small batches carry their fixed cost (a 4-item batch's 2 ms is 0.5 ms an
            # item, five times a large batch's), and a guess from the prior is a guess: a large
            # batch alone is served, as before deadlines.
            alone = (adm.stats.requests_in_flight == 1 and not adm._queue
                     and not (measured and set(counts) <= {PAIRINGS}))
            adm._check_deadline(self.client, self.work, left, included=True, alone=alone)

    def release(self) -> None:
        adm = self.admission
        with adm._lock:
            if self.released:
                return
            self.released = True
            s = adm.stats
            s.items_in_flight -= self.items
            s.bytes_in_flight -= self.nbytes
            s.work_in_flight = max(0.0, s.work_in_flight - self.work)
            s.requests_in_flight -= 1
            adm._flight.discard(self)
            adm.share.add(self.client, -self.work)
            n = adm._client_flight.get(self.client, 0) - 1
            if n > 0:
                adm._client_flight[self.client] = n
            else:
                adm._client_flight.pop(self.client, None)
            if adm._clock() > self.deadline:
                s.deadline_missed_total += 1
            adm._dispatch()

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class AdmittedBuffer:
    """A landed buffer with its admission ticket: :meth:`release` gives back both, so every
    path that releases the buffer (answered, dropped, shut down) also ends the charge."""

    __slots__ = ("buffer", "ticket")

    def __init__(self, buffer: Any, ticket: Ticket):
        self.buffer, self.ticket = buffer, ticket

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.buffer, attr)

    def hand_off(self, to: str, *, expected: str | None = None) -> AdmittedBuffer:
        self.buffer.hand_off(to, expected=expected)
        return self

    def release(self) -> None:
        self.buffer.release()
        self.ticket.release()
