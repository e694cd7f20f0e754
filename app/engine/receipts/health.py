"""Whether the receipt store can take writes now (docs/operations.md, "Receipts").

Every answered verdict needs its receipt written first, so a store that cannot be written
(database stopped, disk full) makes every verify request fail.  Without a record of that,
each request paid the whole failure again: with PostgreSQL stopped every request waited
for the pool's 10 s connect timeout, and ``/readyz`` kept answering 200.

:class:`StoreHealth` is that record, kept by each :class:`app.engine.receipts.store.ReceiptStore`:

* a write that fails for a reason of the store's (not of the request: a repeated id is
  not one) or a failed probe marks it *down*, with a :data:`reason <REASONS>` and a message
  (logged once at error level on the transition, not per request);
* while it is down, writes are refused at once (:meth:`StoreHealth.gate` raises
  :class:`app.core.errors.StoreUnavailable` with ``retry_after``) instead of trying the
  database again, except that at most one probe per ``probe_interval`` seconds tries it;
* a successful probe marks it *up* again (logged at warning level): recovery needs no
  operator.

The probe is the store's own (``probe(down_reason)``): a cheap ``SELECT 1`` while up or
when the database was unreachable, a real write (SQLite: allocate pages and commit) after
a failed write, since a disk that is full still answers reads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.core.errors import StoreUnavailable

log = logging.getLogger("zapverify.store")

#: Why a store is down: ``disk_full`` (SQLite ``SQLITE_FULL``, ``ENOSPC``, PostgreSQL
#: SQLSTATE 53100), ``unreachable`` (connection refused, timed out or lost; pool timeout),
#: ``read_only`` (the file or database refuses writes), ``io_error`` (the OS failed a read or
#: write), ``write_failed`` (any other failure of the database).
REASONS = ("disk_full", "unreachable", "read_only", "io_error", "write_failed")

#: What a client is told per reason: the whole of the error message and of ``/readyz``'s
#: ``message``.  The store's address and the driver's words (:attr:`Fault.detail`) would tell
#: anyone who can reach the open ``/readyz`` the database's user, host, port and name, so
#: they go only to the log and to the admin-scoped ``/v1/status`` (:meth:`StoreHealth.snapshot`
#: with ``detail=True``), as web3signer's health check reports a check's name and state only.
_SAYS = {"disk_full": "the disk of the receipt store is full",
         "unreachable": "the receipt store's database cannot be reached",
         "read_only": "the receipt store refuses writes (read-only)",
         "io_error": "the receipt store's disk failed a read or write",
         "write_failed": "the receipt store failed a write"}


@dataclass(frozen=True)
class Fault:
    """A failure of the store itself: ``reason`` one of :data:`REASONS`, ``detail`` the
    database's own words (with the store's path or address: for the log and admins only)."""

    reason: str
    detail: str

    def message(self) -> str:
        """What is wrong, in words a client may see (no address, no driver text)."""
        return _SAYS[self.reason]

    def describe(self) -> str:
        """:meth:`message` with the detail: for the log and the admin-scoped status."""
        return f"{self.message()}: {self.detail}"


class StoreHealth:
    """The up/down state of one receipt store; thread-safe.

    Args:
        probe: ``probe(down_reason)`` raises when the store cannot serve (``down_reason``
            is ``None`` while up, else the reason it went down for, so the store can pick a
            probe that would see that fault); must be bounded in time.
        classify: maps an exception of a failed probe to a :class:`Fault`, or ``None`` when
            it is not the store's fault.
        probe_interval: seconds; at most one probe per interval, whoever asks.
        retry_after: seconds a refused client is told to wait (``Retry-After``).

    Attributes:
        failures: reason → writes and probes that failed for it since the store opened
            (``zapverify_receipt_store_failures_total`` is fed from it).
    """

    def __init__(self, probe: Callable[[str | None], None], classify: Callable[[BaseException], Fault | None],
                 *, probe_interval: float = 1.0, retry_after: float = 1.0, name: str = "receipt store"):
        self._probe, self._classify, self.name = probe, classify, name
        self.probe_interval, self.retry_after = probe_interval, retry_after
        self._lock = threading.Lock()
        self._probing = threading.Lock()
        self._fault: Fault | None = None
        self._since = time.monotonic()
        self._last_probe = time.monotonic()  # the store was just opened: that was a probe
        self.failures: dict[str, int] = {}

    # ------------------------------------------------------------------ state
    @property
    def up(self) -> bool:
        return self._fault is None

    def snapshot(self, *, detail: bool = False) -> dict:
        """``{"up": bool, "reason": str | None, "message": str | None, "for_seconds": float}``
        (``for_seconds``: how long the store has been in this state; ``message`` in the words
        of :data:`_SAYS`, nothing of the store's address).  ``detail=True`` (the admin-scoped
        status) adds ``"detail"``: the database's own words with the path or address, None while up."""
        f = self._fault
        out: dict = {"up": f is None, "reason": None if f is None else f.reason,
                     "message": None if f is None else f.message(),
                     "for_seconds": round(time.monotonic() - self._since, 3)}
        if detail:
            out["detail"] = None if f is None else f.detail
        return out

    def error(self, fault: Fault | None = None) -> StoreUnavailable:
        """The error a refused or failed request gets (503 with ``Retry-After``)."""
        f = fault or self._fault or Fault("write_failed", "unknown")
        return StoreUnavailable(f"{f.message()}; retry in {self.retry_after:g} s", reason=f.reason,
                                retry_after=self.retry_after)

    # ------------------------------------------------------------------ transitions
    def failed(self, fault: Fault) -> None:
        """Record a failed write or probe: the store is down for ``fault.reason``."""
        with self._lock:
            self.failures[fault.reason] = self.failures.get(fault.reason, 0) + 1
            was = self._fault
            self._fault = fault
            self._last_probe = time.monotonic()  # the failure itself was the latest try
            if was is None or was.reason != fault.reason:
                self._since = time.monotonic()
                log.error("%s is down (%s), verify requests get 503 STORE_UNAVAILABLE until it recovers: %s",
                          self.name, fault.reason, fault.describe())

    def succeeded(self) -> None:
        """Record a write or probe that worked: the store is up."""
        if self._fault is None:  # the common case, without the lock
            return
        with self._lock:
            was, self._fault = self._fault, None
            if was is not None:
                log.warning("%s recovered after %.1f s down (%s)", self.name, time.monotonic() - self._since,
                            was.reason)
                self._since = time.monotonic()

    # ------------------------------------------------------------------ probing
    def check(self) -> bool:
        """Probe the store if the last probe is ``probe_interval`` old and no other thread is
        probing; returns whether it is up.  Blocks for the probe (bounded by the store's probe
        timeout)."""
        if time.monotonic() - self._last_probe < self.probe_interval:
            return self.up
        if not self._probing.acquire(blocking=False):  # another thread is finding out
            return self.up
        try:
            self._last_probe = time.monotonic()
            fault = self._fault
            try:
                self._probe(None if fault is None else fault.reason)
            except Exception as exc:  # noqa: BLE001 - classified; anything else is "write_failed"
                found = self._classify(exc) or Fault("write_failed", str(exc))
                self.failed(found)
                return False
            self.succeeded()
            return True
        finally:
            self._probing.release()

    def gate(self, *, write: bool = True) -> None:
        """Call before using the store: returns at once while it is up; while it is down,
        probes it if one is due and raises :class:`StoreUnavailable` (``retry_after`` set) at
        once unless that probe found it recovered.  ``write=False`` (a read) is only refused
        when the database is unreachable: a full disk still serves reads."""
        fault = self._fault
        if fault is None or (not write and fault.reason != "unreachable"):
            return
        if not self.check():
            raise self.error()
