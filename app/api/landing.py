"""Where a received frame lands: a buffer of the runtime's UMA pool (docs/architecture.md, "Memory"), or
heap memory when the runtime has no pool (scripts, tests).  The engine then verifies the
frame's columns in that buffer, so the bytes are copied once, from the socket's chunks.
The socket listeners of :mod:`app.engine.ingest` land frames with the same
:func:`app.engine.memory.heap.land`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from starlette.concurrency import run_in_threadpool

from app.engine.memory.heap import HeapBuffer, land
from app.engine.memory.pool import PoolBuffer, UmaPool


@asynccontextmanager
async def landing(pool: UmaPool | None, nbytes: int) -> AsyncIterator[np.ndarray]:
    """A writable ``uint8[nbytes]`` buffer of ``pool`` (heap memory where None), given back on exit.

    Waiting for room in the pool happens off the event loop.  Raises what
    :meth:`app.engine.memory.pool.UmaPool.acquire` raises: :class:`app.core.errors.PoolExhausted` (503)
    when no room frees up in time, :class:`app.core.errors.BufferTooLarge` (413) for a frame
    larger than the whole pool.
    """
    buf = land(None, nbytes) if pool is None else await run_in_threadpool(land, pool, nbytes)
    try:
        yield buf.array
    finally:
        buf.release()


class GrowingLanding:
    """Pool memory for a body of ``size`` bytes that grows as its bytes arrive.

    A header alone must not reserve what its ``size`` declares (a 16-byte header could hold
    256 MiB while its client trickles the rest): the first buffer is at most ``step`` bytes,
    and each time the bytes received outgrow it, a buffer twice as large (at most ``size``)
    replaces it, the bytes so far copied over.  What one connection holds is so at most
    ``max(step, 2 × received)``; the copies add up to less than ``2 × size``.
    """

    def __init__(self, pool: UmaPool | None, size: int, step: int):
        self.pool, self.size, self.step = pool, size, step
        self._buf: PoolBuffer | HeapBuffer | None = None

    @property
    def capacity(self) -> int:
        return 0 if self._buf is None else self._buf.nbytes

    async def room_for(self, nbytes: int, filled: int) -> np.ndarray | None:
        """Make the buffer hold at least ``nbytes`` (≤ ``size``), its first ``filled`` bytes
        kept; returns the new ``uint8`` array when the buffer was replaced, else None.
        Raises what :func:`landing` does (:class:`app.core.errors.PoolExhausted`, ...)."""
        if nbytes <= self.capacity:
            return None
        want = min(self.size, max(nbytes, self.step, 2 * self.capacity))
        pool = self.pool
        new = land(None, want) if pool is None else await run_in_threadpool(land, pool, want)
        array = new.array[:want]
        if self._buf is not None:
            array[:filled] = self._buf.array[:filled]
        self._retire()
        self._buf = new
        return array

    def _retire(self) -> None:
        if self._buf is not None:
            self._buf.release()
            self._buf = None

    def close(self) -> None:
        self._retire()

    async def __aenter__(self) -> GrowingLanding:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
