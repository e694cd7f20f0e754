"""The UMA pool's GPU self-test: both CUDA memory sources read and written by a kernel in
place (run by ``scripts/gpu_check``; needs CuPy and a device)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from app.engine.memory.plan import CHUNK_BYTES
from app.engine.memory.pool import UmaPool
from app.engine.memory.sources import import_cupy


def selftest_cuda(nbytes: int = 1 << 20, *, cupy: Any = None) -> dict[str, Any]:
    """Exercise both CUDA pool sources on the current device (for ``scripts/gpu_check``).

    For ``pinned`` and ``managed`` memory: build a small pool, fill an input buffer from the
    host, run a CuPy elementwise kernel that reads it in place and writes ``(3x + 7) mod 256``
    into a second pool buffer, synchronise, and compare on the host; also compare a device-side
    sum of the input with the host's.  Returns ``{"device": ..., "pinned": {...}, "managed": {...},
    "ok": bool}``; each source reports ``ok``, ``capacity_bytes``, ``seconds`` or ``error``.
    Raises :class:`AllocatorUnavailable` when CuPy cannot be imported.
    """
    cp = cupy or import_cupy()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props.get("name", b"")
    out: dict[str, Any] = {"device": name.decode(errors="replace") if isinstance(name, bytes) else str(name)}
    kernel = cp.ElementwiseKernel("uint8 x", "uint8 y", "y = (unsigned char)(x * 3 + 7)", "zap_pool_selftest")
    want_in = (np.arange(nbytes, dtype=np.uint64) % 251).astype(np.uint8)
    want_out = ((want_in.astype(np.uint32) * 3 + 7) & 0xFF).astype(np.uint8)
    for source in ("pinned", "managed"):
        t0 = time.perf_counter()
        try:
            with UmaPool.create(4 * max(nbytes, CHUNK_BYTES), source, cupy=cp, debug=True) as pool:
                with pool.acquire(nbytes, "ingest") as src, pool.acquire(nbytes, "backend") as dst:
                    src.array[:] = want_in
                    src.hand_off("backend", expected="ingest")
                    kernel(src.device_array(), dst.device_array())
                    device_sum = int(src.device_array().sum(dtype=cp.uint64))
                    cp.cuda.runtime.deviceSynchronize()
                    ok_out = bool(np.array_equal(dst.array, want_out))
                    host_sum = int(want_in.sum(dtype=np.uint64))
                    out[source] = {"ok": ok_out and device_sum == host_sum, "kernel_output_matches": ok_out,
                                   "device_sum": device_sum, "host_sum": host_sum,
                                   "capacity_bytes": pool.capacity_bytes, "memory": pool.stats()["memory"],
                                   "seconds": round(time.perf_counter() - t0, 6)}
        except Exception as exc:  # reported, so gpu_check prints every source's outcome
            out[source] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    out["ok"] = all(out[s]["ok"] for s in ("pinned", "managed"))
    return out
