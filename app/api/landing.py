"""Where a received frame lands: a buffer of the engine's UMA pool (docs/architecture.md, "Memory"), or
heap memory when the engine has no pool (scripts, tests).  The engine then verifies the
frame's columns in that buffer, so the bytes are copied once, from the socket's chunks.
The socket listeners of :mod:`app.engine.ingest` land frames with the same
:func:`app.engine.memory.heap.land`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np
from starlette.concurrency import run_in_threadpool

from app.engine.memory.heap import land
from app.engine.verify.engine import Engine


@asynccontextmanager
async def landing(engine: Engine, nbytes: int) -> AsyncIterator[np.ndarray]:
    """A writable ``uint8[nbytes]`` buffer, given back to the pool on exit.

    Waiting for room in the pool happens off the event loop.  Raises what
    :meth:`app.engine.memory.pool.UmaPool.acquire` raises: :class:`app.errors.PoolExhausted` (503)
    when no room frees up in time, :class:`app.errors.BufferTooLarge` (413) for a frame
    larger than the whole pool.
    """
    pool = getattr(engine, "pool", None)
    buf = land(None, nbytes) if pool is None else await run_in_threadpool(land, pool, nbytes)
    try:
        yield buf.array
    finally:
        buf.release()
