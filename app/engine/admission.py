"""Admission control's counters: the items and bytes of verify work in flight in one process,
and their bounds (docs/operations.md, "Load shedding").  Shared by the HTTP and WebSocket
routes (app/api/admission.py, which also has the ASGI middleware) and the NIC ingest
listeners, which charge each frame's bytes before landing it.

A charge beyond a bound raises :class:`app.core.errors.Overloaded` (503, ``Retry-After``); a
ticket that finds nothing else in flight is always admitted.  Thread-safe: ingest receive
threads and the event loop share one :class:`Admission`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from app.core.errors import Overloaded


@dataclass
class AdmissionStats:
    items_in_flight: int = 0
    bytes_in_flight: int = 0
    requests_in_flight: int = 0
    admitted_total: int = 0
    refused_total: int = 0
    items_peak: int = 0
    bytes_peak: int = 0


class Admission:
    """The items and bytes in flight in this process, and their bounds."""

    def __init__(self, max_items: int, max_bytes: int, retry_after: float = 1.0):
        self.max_items, self.max_bytes, self.retry_after = max_items, max_bytes, retry_after
        self.stats = AdmissionStats()
        self._lock = threading.Lock()

    def admit(self, nbytes: int = 0, items: int = 0) -> Ticket:
        """A ticket charged ``nbytes`` bytes and ``items`` items; raises :class:`Overloaded`."""
        ticket = Ticket(self)
        with self._lock:
            self._charge(ticket, nbytes, items, new=True)
        return ticket

    def _charge(self, ticket: Ticket, nbytes: int, items: int, *, new: bool = False) -> None:
        s = self.stats
        # Alone in flight (this ticket's own earlier charges aside): always admitted.
        others = s.requests_in_flight - (0 if new else 1)
        if others > 0 and (s.items_in_flight + items > self.max_items or s.bytes_in_flight + nbytes > self.max_bytes):
            s.refused_total += 1
            raise Overloaded(f"over the admission bound ({s.items_in_flight} items, {s.bytes_in_flight} bytes in "
                             f"flight; bounds {self.max_items} items, {self.max_bytes} bytes); retry later",
                             retry_after=self.retry_after, field="admission")
        if new:
            s.requests_in_flight += 1
            s.admitted_total += 1
        s.items_in_flight += items
        s.bytes_in_flight += nbytes
        s.items_peak = max(s.items_peak, s.items_in_flight)
        s.bytes_peak = max(s.bytes_peak, s.bytes_in_flight)
        ticket.items += items
        ticket.nbytes += nbytes

    def snapshot(self) -> dict:
        with self._lock:
            return {**self.stats.__dict__, "max_items": self.max_items, "max_bytes": self.max_bytes}


class Ticket:
    """One admitted request's charge; :meth:`add` charges more, :meth:`release` gives it all back."""

    def __init__(self, admission: Admission):
        self.admission = admission
        self.items = self.nbytes = 0
        self.released = False

    def add(self, nbytes: int = 0, items: int = 0) -> None:
        """Charge ``nbytes`` and ``items`` more; raises :class:`Overloaded` beyond the bounds."""
        if self.released:
            return
        with self.admission._lock:
            self.admission._charge(self, nbytes, items)

    def release(self) -> None:
        with self.admission._lock:
            if self.released:
                return
            self.released = True
            s = self.admission.stats
            s.items_in_flight -= self.items
            s.bytes_in_flight -= self.nbytes
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
