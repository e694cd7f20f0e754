"""The host device: kernel sources built by g++ (:mod:`hostbuild`) and called through ctypes.

Buffers are numpy arrays, launches are plain calls (the kernel walks every item with one
"thread", zv_port.cuh), and :mod:`app.engine.device.ops` runs on it unchanged — this is
how kernel code is tested where there is no GPU, and what the ``kernel-host`` backend runs.
ctypes releases the GIL during a call, so other Python threads keep running meanwhile.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from app.core.errors import KernelBuildError
from app.engine.device import hostbuild
from app.engine.device.registry import KernelSource

_SCALARS = {np.dtype(np.uint8): ctypes.c_uint8, np.dtype(np.uint32): ctypes.c_uint32,
            np.dtype(np.uint64): ctypes.c_uint64, np.dtype(np.int32): ctypes.c_int32,
            np.dtype(np.int64): ctypes.c_int64}


def c_arg(a: Any):
    """A kernel argument as ctypes passes it: a buffer's address, or a fixed-width scalar.

    Raises ``TypeError`` for anything else (a Python int has no width, so is refused).
    """
    if isinstance(a, np.ndarray):
        return ctypes.c_void_p(a.ctypes.data)
    if a is None:
        return ctypes.c_void_p(None)
    if isinstance(a, np.generic) and a.dtype in _SCALARS:
        return _SCALARS[a.dtype](a.item())
    raise TypeError(f"kernel argument of type {type(a).__name__} (use numpy arrays and np.uint32/np.uint64)")


class HostDevice:
    """A :class:`app.engine.device.ops.Device` running the g++ build of the kernels."""

    name = "kernel-host"
    #: The host build runs a launch on one thread: one "SM" (for wave sizes).
    multiprocessors = 1

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._functions: dict[tuple[KernelSource, str], Any] = {}

    def function(self, source: KernelSource, entry: str):
        """The exported entry point ``entry`` of ``source`` (built on first use).

        Raises :class:`KernelBuildError` when the build fails or the symbol is missing.
        """
        key = (source, entry)
        with self._lock:
            fn = self._functions.get(key)
            if fn is None:
                lib = hostbuild.load(source.name, source.directory)
                try:
                    fn = getattr(lib, entry)
                except AttributeError:
                    raise KernelBuildError(f"{source.name}.cu exports no {entry}", field=entry) from None
                fn.restype = None
                self._functions[key] = fn
            return fn

    def put(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a)

    def put_columns(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        return [self.put(a) for a in arrays]

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(max(1, int(nbytes)), dtype=np.uint8)

    def get(self, buf: np.ndarray, nbytes: int) -> np.ndarray:
        return buf.reshape(-1).view(np.uint8)[:nbytes].copy()

    def launch(self, source: KernelSource, entry: str, threads: int, args: tuple, *,
               block: int = 256, one_block: bool = False) -> None:
        fn = self.function(source, entry)
        if threads <= 0 and not one_block:
            return
        fn(*(c_arg(a) for a in args))

    def sync(self) -> None:
        return None

    # The stream interface of the pipelined path (app/engine/device/pipeline.py): here work
    # runs when it is queued, so streams, events and asynchronous copies are immediate.
    def attributes(self, source: KernelSource, entry: str) -> dict[str, int]:
        self.function(source, entry)
        return {}

    def streams(self, count: int) -> list[None]:
        return [None] * count

    @contextlib.contextmanager
    def on(self, stream: None) -> Iterator[None]:
        yield

    def record(self) -> None:
        return None

    def wait(self, event: None) -> None:
        return None

    def pinned(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def get_async(self, buf: np.ndarray, nbytes: int, out: np.ndarray) -> None:
        out[:nbytes] = buf.reshape(-1).view(np.uint8)[:nbytes]

    @contextlib.contextmanager
    def timer(self) -> Iterator[dict[str, float]]:
        """Time the calls inside the ``with`` block (launches are synchronous here)."""
        out: dict[str, float] = {}
        t0 = time.perf_counter()
        yield out
        out["seconds"] = out["wall_seconds"] = time.perf_counter() - t0

    def info(self) -> dict:
        from app.engine.device.hostbuild import compiler

        return {"name": f"host build ({compiler() or 'no compiler'})", "transfer": "in place"}


_default: HostDevice | None = None


def device() -> HostDevice:
    """The process-wide host device (kernels built once per process)."""
    global _default
    if _default is None:
        _default = HostDevice()
    return _default
