"""The bounded ring between the ingest receive threads and the verify workers (docs/architecture.md, "Pipeline").

A receive thread lands a whole ZAP frame in a pool buffer and puts one :class:`Entry` —
(buffer, length, reply route) — in the :class:`Ring`; a verify worker takes entries out,
several at a time so that small frames can be verified as one batch.  The ring holds a
fixed number of entries and never grows: a full ring is *backpressure*, and each producer
decides what that means for its transport (:meth:`Ring.try_put` never blocks; TCP and QUIC
stop reading until :meth:`Ring.on_space` tells them there is room again, UDP drops the
datagram and counts it).

Ownership of an entry's buffer is explicit and moves one way, one phase at a time
(:data:`PHASES`, the owner tags of :mod:`app.engine.memory.pool`): ``ingest`` while the receive
thread fills it and while it waits in the ring, ``dispatch`` once a worker has taken it,
``backend`` while the engine verifies its items, ``store`` while its receipt is written and
its reply is sent.  The buffer is released only after its reply has been handed to the
transport (or the peer is gone), never before: nothing else can be given the same memory
while a backend may still read it.

Thread-safe; imports only the standard library.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

#: The owners an entry's buffer passes through, in order (owner tags of app.engine.memory.pool).
PHASES = ("ingest", "dispatch", "backend", "store")


class ReplyRoute(Protocol):
    """How the reply to one frame goes back to its sender (one TCP connection, one UDP peer
    address, one QUIC stream)."""

    @property
    def alive(self) -> bool:
        """False once the reply can no longer be delivered (the peer went away)."""

    def send(self, data: bytes, done: Callable[[bool], None]) -> None:
        """Hand ``data`` (one ZAP frame) to the transport; ``done(sent)`` is called exactly
        once, from any thread, when the frame has been written (``sent`` True) or can no
        longer be (False).  Never blocks on the peer."""


@dataclass
class Entry:
    """One received frame waiting for a verify worker.

    Attributes:
        buffer: a :class:`app.engine.memory.pool.PoolBuffer` (or ``HeapBuffer``) holding the frame.
        length: the frame's size in bytes (its header's ``size``).
        route: where its reply goes.
        transport: ``tcp``, ``udp`` or ``quic`` (the ring counts its depth per transport).
        received: ``time.perf_counter()`` when its last byte arrived, seconds.
    """

    buffer: Any
    length: int
    route: ReplyRoute
    transport: str
    received: float = field(default_factory=time.perf_counter)

    @property
    def frame(self):
        """``uint8[length]`` view of the frame in its buffer."""
        return self.buffer.array[:self.length]


class Ring:
    """A fixed-capacity FIFO of :class:`Entry` (a circular array under one lock).

    Args:
        capacity: entries it holds, at least 1.

    Producers call :meth:`try_put`; consumers :meth:`take`.  After :meth:`close` nothing
    more is put, and :meth:`take` still hands out what is left, then returns ``[]``.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("a ring holds at least one entry")
        self.capacity = capacity
        self._slots: list[Entry | None] = [None] * capacity
        self._head = 0  # next to take
        self._count = 0
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._space_listeners: list[Callable[[], None]] = []
        self._starved = False  # a producer found the ring full since the last notice
        self.high_water = 0
        self.put_total = 0
        self.full_total = 0
        self._depth: dict[str, int] = {}
        self._high: dict[str, int] = {}

    # ------------------------------------------------------------------ producers
    def try_put(self, entry: Entry) -> bool:
        """Append ``entry``; False (and counted in ``full_total``) when the ring is full or closed."""
        with self._cond:
            if self._closed or self._count == self.capacity:
                self.full_total += not self._closed
                self._starved = True
                return False
            self._slots[(self._head + self._count) % self.capacity] = entry
            self._count += 1
            self.put_total += 1
            self.high_water = max(self.high_water, self._count)
            t = entry.transport
            self._depth[t] = self._depth.get(t, 0) + 1
            self._high[t] = max(self._high.get(t, 0), self._depth[t])
            self._cond.notify()
        return True

    def on_space(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` (from a consumer's thread, quickly, never raising) whenever
        entries are taken out after a producer found the ring full."""
        with self._cond:
            self._space_listeners.append(listener)

    # ------------------------------------------------------------------ consumers
    def take(self, max_entries: int, timeout: float, linger: float = 0.0) -> list[Entry]:
        """Up to ``max_entries`` entries, oldest first.

        Waits up to ``timeout`` seconds for the first; then up to ``linger`` seconds more
        for others to arrive (the coalescing window), returning early once it has
        ``max_entries``.  Returns ``[]`` on timeout or when the ring is closed and empty.
        """
        out: list[Entry] = []
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._count:
                remaining = deadline - time.monotonic()
                if self._closed or remaining <= 0:
                    return out
                self._cond.wait(remaining)
            self._pop_into(out, max_entries)
            if linger > 0 and len(out) < max_entries and not self._closed:
                until = time.monotonic() + linger
                while len(out) < max_entries:
                    remaining = until - time.monotonic()
                    if remaining <= 0 or self._closed:
                        break
                    if not self._count:
                        self._cond.wait(remaining)
                    self._pop_into(out, max_entries)
            listeners = self._space_listeners if self._starved else ()
            self._starved = False
        for listener in listeners:
            listener()
        return out

    def _pop_into(self, out: list[Entry], max_entries: int) -> None:
        while self._count and len(out) < max_entries:
            entry = self._slots[self._head]
            assert entry is not None  # the slots from head on hold _count entries
            self._slots[self._head] = None
            self._head = (self._head + 1) % self.capacity
            self._count -= 1
            self._depth[entry.transport] -= 1
            out.append(entry)

    # ------------------------------------------------------------------ life cycle / reporting
    def close(self) -> None:
        """Refuse further puts and wake every waiting consumer; entries in it stay takeable."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return self._count

    def full(self) -> bool:
        return self._count >= self.capacity

    def depth(self, transport: str) -> tuple[int, int]:
        """(entries of ``transport`` in the ring now, the most there have been at once)."""
        with self._cond:
            return self._depth.get(transport, 0), self._high.get(transport, 0)

    def stats(self) -> dict[str, int]:
        """``capacity``, ``depth``, ``high_water``, ``put_total``, ``full_total`` (entries)."""
        with self._cond:
            return {"capacity": self.capacity, "depth": self._count, "high_water": self.high_water,
                    "put_total": self.put_total, "full_total": self.full_total}
