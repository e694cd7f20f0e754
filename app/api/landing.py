"""Where a received frame lands: a buffer of the engine's UMA pool (DESIGN.md section 7), or
heap memory when the engine has no pool (scripts, tests).  The engine then verifies the
frame's columns in that buffer, so the bytes are copied once, from the socket's chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np
from starlette.concurrency import run_in_threadpool

from app.engine.dispatch import Engine


@asynccontextmanager
async def landing(engine: Engine, nbytes: int) -> AsyncIterator[np.ndarray]:
    """A writable ``uint8[nbytes]`` buffer, given back to the pool on exit.

    Waiting for room in the pool happens off the event loop.  Raises what
    :meth:`app.engine.pool.UmaPool.acquire` raises: :class:`app.errors.PoolExhausted` (503)
    when no room frees up in time, :class:`app.errors.BufferTooLarge` (413) for a frame
    larger than the whole pool.
    """
    pool = getattr(engine, "pool", None)
    if pool is None:
        yield np.empty(nbytes, dtype=np.uint8)
        return
    buf = await run_in_threadpool(pool.acquire, nbytes, "ingest")
    try:
        yield buf.array
    finally:
        buf.release()
