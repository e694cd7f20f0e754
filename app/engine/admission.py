"""Admission control's counters: the items, bytes and estimated work of the verify requests in
flight in one process, and their bounds (docs/operations.md, "Load shedding").  Shared by the
HTTP and WebSocket routes (app/api/admission.py, which also has the ASGI middleware) and the
NIC ingest listeners.

What a request is charged:

- **bytes as they arrive**, never what it declares: a client that declares 256 MiB and sends
  slowly holds what it has sent, not the bound;
- **items** once their number is known (a ZAP header's ``count``, a JSON body once parsed);
- **work**: its items times each scheme's measured seconds per item (:class:`ServiceRates`),
  so the time a new request would wait behind what is in flight can be estimated without
  knowing how fast this host is.  Until its items are known an HTTP request counts as the
  average request of late (an exponentially weighted mean of the work of the last
  requests), at most an eighth of ``max_wait``: requests arriving together then see each
  other at once, and are refused before their bodies are read and parsed, not after (at 4x
  the sustainable rate, parsing the bodies of requests refused only once their items were
  known cut the served rate to a third).  The cap keeps one large request from making the
  next few small ones look long; the declared size is not used (a client could declare
  any); WebSocket messages and ingest frames arrive whole, their items known at once, and
  get no such estimate.

What is refused (:class:`app.core.errors.Overloaded`, 503 with ``Retry-After``):

- a new request while the item or byte bound is full, or while the work in flight would take
  longer than ``max_wait`` seconds (then ``Retry-After`` is that excess, at least
  ``retry_after``);
- a request whose items are known and would wait longer than ``max_wait`` behind the others;
- a charge that takes the items or bytes in flight past their bound;
- a charge that takes one request past ``max_share`` of the byte bound while another request
  is in flight or one was refused in the last ``retry_after`` seconds: nobody holds the whole
  budget while others are turned away.

A ticket that finds nothing else in flight is always admitted, so a request larger than the
bound is served when the process is idle.  Thread-safe: ingest receive threads, the shadow
checker's stats and the event loop share one :class:`Admission`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.errors import Overloaded

#: Why a charge was refused (the ``reason`` of :attr:`AdmissionStats.refused_by` and of the
#: ``zapverify_admission_refusals_total`` metric).
REASONS = ("items", "bytes", "share", "wait")


@dataclass
class AdmissionStats:
    items_in_flight: int = 0
    bytes_in_flight: int = 0
    requests_in_flight: int = 0
    #: Estimated seconds of verify work in flight (each request's items × seconds per item).
    work_in_flight: float = 0.0
    admitted_total: int = 0
    refused_total: int = 0
    refused_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    items_peak: int = 0
    bytes_peak: int = 0


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

    A scheme's first batch after start is not taken (a cold process: worker pools starting,
    caches empty; one took 80 ms for 2 items, 400 times the warm cost, and turned the next
    requests away on an idle server), and until ``min_items`` items of a scheme have been
    measured its items count as no work (the item and byte bounds still apply).
    """

    def __init__(self, alpha: float = 0.2, clock: Callable[[], float] = time.monotonic, *, min_items: int = 256):
        self.alpha, self._clock, self.min_items = alpha, clock, min_items
        self._lock = threading.Lock()
        self._last_end = -math.inf
        self._weighted: dict[str, tuple[float, float]] = {}  # scheme -> (seconds, items)
        self._seen: dict[str, int] = {}  # scheme -> items measured (the first batch not counted)

    def observe(self, scheme: str, items: int, seconds: float, *, end: float | None = None) -> None:
        """One verified batch of ``items`` of ``scheme`` that took ``seconds`` (wall clock),
        ending at ``end`` (the clock's now by default)."""
        if items <= 0 or seconds < 0:
            return
        end = self._clock() if end is None else end
        with self._lock:
            marginal = max(0.0, end - max(end - seconds, self._last_end))
            self._last_end = max(self._last_end, end)
            if scheme not in self._seen:  # the cold first batch
                self._seen[scheme] = 0
                return
            self._seen[scheme] += items
            s, n = self._weighted.get(scheme, (0.0, 0.0))
            a = self.alpha if scheme in self._weighted else 1.0
            self._weighted[scheme] = ((1 - a) * s + a * marginal, (1 - a) * n + a * items)

    def per_item(self, scheme: str) -> float | None:
        """Seconds of work per item of ``scheme``, or None until ``min_items`` were measured."""
        with self._lock:
            s, n = self._weighted.get(scheme, (0.0, 0.0))
            seen = self._seen.get(scheme, 0)
        return s / n if n > 0 and seen >= self.min_items else None

    def seconds(self, counts: Mapping[str, int]) -> float:
        """Estimated seconds of work for ``counts`` (scheme id -> items); unmeasured schemes
        count 0."""
        return sum(n * (self.per_item(s) or 0.0) for s, n in counts.items())

    def snapshot(self) -> dict[str, float]:
        """Scheme id -> items per second (the inverse of :meth:`per_item`), measured schemes only."""
        with self._lock:
            return {s: (n / sec if sec > 0 else math.inf) for s, (sec, n) in self._weighted.items()
                    if n > 0 and self._seen.get(s, 0) >= self.min_items}

    # StatsListener: only batches matter here.
    def batch(self, scheme: str, backend: str, items: int, valid: int, seconds: float) -> None:
        self.observe(scheme, items, seconds)


class Admission:
    """The items, bytes and work in flight in this process, and their bounds (module doc).

    Args:
        max_items: items in flight beyond which a charge is refused.
        max_bytes: bytes in flight beyond which a charge is refused.
        retry_after: seconds, the ``Retry-After`` of a refusal by size.
        max_wait: seconds a new request may be estimated to wait behind the work in flight;
            0 turns the time bound off.
        max_share: fraction (0, 1] of ``max_bytes`` one request may hold while others wait.
        rates: the per-scheme cost model (a new :class:`ServiceRates` by default).
    """

    def __init__(self, max_items: int, max_bytes: int, retry_after: float = 1.0, *, max_wait: float = 0.0,
                 max_share: float = 0.5, rates: ServiceRates | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if not 0 < max_share <= 1:
            raise ValueError(f"max_share must be in (0, 1], not {max_share}")
        self.max_items, self.max_bytes, self.retry_after = max_items, max_bytes, retry_after
        self.max_wait, self.max_share = max_wait, max_share
        self.rates = rates if rates is not None else ServiceRates()
        self.stats = AdmissionStats()
        self._clock = clock
        self._last_refusal = -math.inf
        #: Estimated seconds of work of a request whose items are not known yet (module doc).
        self._average_work = 0.0
        self._lock = threading.Lock()

    def admit(self, nbytes: int = 0, items: int = 0, *, provisional: bool = False, wait: bool = True) -> Ticket:
        """A new ticket charged ``nbytes`` bytes and ``items`` items; with ``provisional`` (a
        request whose body must be read and parsed before its items are known: HTTP), also the
        average request's work, at most an eighth of ``max_wait``, until
        :meth:`Ticket.add_items` says its own.  ``wait=False`` leaves the time bound out (the
        memory bounds only: a WebSocket message arriving, which the route then charges and
        answers ``OVERLOADED`` on its own, the connection kept).  Raises :class:`Overloaded`."""
        ticket = Ticket(self)
        with self._lock:
            work = min(self._average_work, self.max_wait / 8) if provisional else 0.0
            self._charge(ticket, nbytes, items, work, new=True, wait=wait)
            ticket.provisional = ticket.work
        return ticket

    def _learn(self, work: float) -> None:
        """One request's work, once its items are known (under the lock)."""
        a = self.AVERAGE_ALPHA if self._average_work > 0 else 1.0
        self._average_work = (1 - a) * self._average_work + a * work

    def estimated_wait(self) -> float:
        """Seconds of verify work in flight: the wait a new request is estimated to have."""
        with self._lock:
            return self.stats.work_in_flight

    def _where(self) -> str:
        """What is in flight and the bounds, for a refusal's message (made only when refusing:
        charges run under the lock on every body chunk)."""
        s = self.stats
        return (f"({s.items_in_flight} items, {s.bytes_in_flight} bytes, ~{s.work_in_flight:.2f} s of work in "
                f"flight; bounds {self.max_items} items, {self.max_bytes} bytes, {self.max_wait:g} s)")

    def _refuse(self, reason: str, message: str, retry_after: float | None = None) -> Overloaded:
        s = self.stats
        s.refused_total += 1
        s.refused_by[reason] += 1
        self._last_refusal = self._clock()
        return Overloaded(message, retry_after=retry_after or self.retry_after, field="admission")

    #: Weight of the newest request in the average request's work.
    AVERAGE_ALPHA = 0.1

    def _charge(self, ticket: Ticket, nbytes: int, items: int, work: float, *, new: bool = False,
                known: bool = False, wait: bool = True) -> None:
        s = self.stats
        # Alone in flight (this ticket's own earlier charges aside): always admitted.
        others = s.requests_in_flight - (0 if new else 1)
        if others > 0:
            # A new request finds a bound already full, or a charge would take it past one.
            if s.items_in_flight + items > self.max_items or (new and s.items_in_flight >= self.max_items):
                raise self._refuse("items", f"over the admission bound {self._where()}; retry later")
            if s.bytes_in_flight + nbytes > self.max_bytes or (new and s.bytes_in_flight >= self.max_bytes):
                raise self._refuse("bytes", f"over the admission bound {self._where()}; retry later")
            # Checked when a request arrives and when its items become known (``known``).
            ahead = s.work_in_flight - ticket.work
            if wait and self.max_wait > 0 and (new or known) and ahead > self.max_wait:
                raise self._refuse("wait", f"the estimated wait, {ahead:.2f} s, is over the bound {self._where()}; "
                                   "retry later", retry_after=max(self.retry_after, ahead - self.max_wait))
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
            return {**self.stats.__dict__, "refused_by": dict(self.stats.refused_by),
                    "max_items": self.max_items, "max_bytes": self.max_bytes, "max_wait": self.max_wait,
                    "max_share": self.max_share, "estimated_wait_seconds": round(self.stats.work_in_flight, 6),
                    "items_per_second": {k: round(v, 1) for k, v in self.rates.snapshot().items()}}


class Ticket:
    """One admitted request's charge; :meth:`add` and :meth:`add_items` charge more,
    :meth:`release` gives it all back."""

    def __init__(self, admission: Admission):
        self.admission = admission
        self.items = self.nbytes = 0
        self.work = 0.0
        #: The average request's work charged at admission, replaced by :meth:`add_items`.
        self.provisional = 0.0
        self.released = False

    def add(self, nbytes: int = 0, items: int = 0) -> None:
        """Charge ``nbytes`` and ``items`` more; raises :class:`Overloaded` beyond the bounds."""
        if self.released:
            return
        with self.admission._lock:
            self.admission._charge(self, nbytes, items, 0.0)

    def add_items(self, counts: Mapping[str, int]) -> None:
        """Charge the items of a request now that they are known (scheme id -> items) and their
        estimated work; raises :class:`Overloaded` beyond the item bound or when the request
        would wait longer than ``max_wait`` behind the work already in flight."""
        if self.released:
            return
        work = self.admission.rates.seconds(counts)
        with self.admission._lock:
            self.admission._learn(work)  # refused or not, it is what such a request costs
            self.admission._charge(self, 0, sum(counts.values()), work - self.provisional, known=True)
            self.provisional = 0.0

    def release(self) -> None:
        with self.admission._lock:
            if self.released:
                return
            self.released = True
            s = self.admission.stats
            s.items_in_flight -= self.items
            s.bytes_in_flight -= self.nbytes
            s.work_in_flight = max(0.0, s.work_in_flight - self.work)
            s.requests_in_flight -= 1

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
