"""Where received bytes land: a buffer of the UMA pool, or plain heap memory when the
engine has no pool (scripts, tests), behind one interface (docs/architecture.md, "Memory")."""

from __future__ import annotations

import numpy as np

from app.core.errors import BufferMisuse
from app.engine.memory.plan import OWNERS
from app.engine.memory.pool import PoolBuffer, UmaPool


class HeapBuffer:
    """A buffer of plain heap memory with the interface of :class:`PoolBuffer`, for an engine
    built without a pool (scripts, tests).  Ownership is tracked the same way; nothing is
    shared, so there is nothing to poison."""

    __slots__ = ("nbytes", "_owner", "_released", "_array")

    def __init__(self, nbytes: int, owner: str):
        if owner not in OWNERS:
            raise BufferMisuse(f"unknown pool owner {owner!r}; one of {', '.join(OWNERS)}", field="owner")
        self.nbytes, self._owner, self._released = nbytes, owner, False
        self._array = np.empty(nbytes, dtype=np.uint8)

    owner = PoolBuffer.owner
    released = PoolBuffer.released

    @property
    def array(self) -> np.ndarray:
        if self._released:
            raise BufferMisuse(f"heap buffer used after release by {self._owner}", field="buffer")
        return self._array

    def hand_off(self, to: str, *, expected: str | None = None) -> HeapBuffer:
        if to not in OWNERS:
            raise BufferMisuse(f"unknown pool owner {to!r}; one of {', '.join(OWNERS)}", field="owner")
        if self._released or (expected is not None and self._owner != expected):
            raise BufferMisuse(f"heap buffer handed to {to} by {expected}, but it is "
                               f"{'released' if self._released else 'owned by ' + self._owner}", field="owner")
        self._owner = to
        return self

    def release(self) -> None:
        self._released = True

    def __enter__(self) -> HeapBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def land(pool: UmaPool | None, nbytes: int, owner: str = "ingest", *,
         timeout: float | None = None) -> PoolBuffer | HeapBuffer:
    """Where received bytes land: a buffer of ``pool``, or heap memory when there is no pool.

    ``timeout`` (seconds, default the pool's ``wait_seconds``; 0 = do not wait) bounds the
    wait for room.  Raises what :meth:`UmaPool.acquire` raises (:class:`PoolExhausted`,
    :class:`BufferTooLarge`, :class:`BufferMisuse`).
    """
    if pool is None:
        return HeapBuffer(int(nbytes), owner)
    return pool.acquire(nbytes, owner, timeout=timeout)
