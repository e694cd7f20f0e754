"""Where the pool's memory comes from: one arena per pool, allocated once.

* ``pinned``  — CUDA page-locked host memory (``cudaHostAlloc``, portable and mapped);
* ``managed`` — CUDA managed memory (``cudaMallocManaged``);
* ``heap``    — anonymous ``mmap`` with transparent-hugepage advice, ``mlock``-ed per chunk.

See :mod:`app.engine.memory.pool` for when each is the right one.  CuPy is imported only
when a CUDA source is asked for.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
from typing import Any

import numpy as np

from app.core.errors import AllocatorUnavailable

log = logging.getLogger("zapverify.pool")

# cudaHostAlloc flags (cuda_runtime_api.h), used when the CuPy build does not export them.
_HOST_ALLOC_PORTABLE = 0x01
_HOST_ALLOC_MAPPED = 0x02

class _HostMemory:
    """Exposes ``nbytes`` at address ``ptr`` to numpy, keeping ``owner`` (the allocation) alive
    for as long as any view of it exists."""

    def __init__(self, ptr: int, nbytes: int, owner: Any):
        self.owner = owner
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def host_array(ptr: int, nbytes: int, owner: Any) -> np.ndarray:
    """``uint8[nbytes]`` view of memory at ``ptr``; the view holds a reference to ``owner``."""
    return np.asarray(_HostMemory(ptr, nbytes, owner))


class Arena:
    """One allocation the pool carves; ``array`` is its ``uint8[nbytes]`` host view."""

    kind = "heap"
    device_id: int | None = None
    hugepage_advice: bool | None = None

    def __init__(self) -> None:
        self.array: np.ndarray
        self.nbytes = 0
        self.locked_bytes = 0
        self.lock_error: str | None = None
        self._cupy: Any = None

    def lock(self, offset: int, length: int) -> None:
        """Page-lock ``[offset, offset + length)`` if the source does not do it itself."""

    def info(self) -> dict[str, Any]:
        return {"kind": self.kind, "locked_bytes": self.locked_bytes, "lock_error": self.lock_error,
                "hugepage_advice": self.hugepage_advice, "device_id": self.device_id}

    def device_array(self, offset: int, nbytes: int, owner: Any) -> Any:
        raise AllocatorUnavailable(f"{self.kind} pool memory is not visible to a GPU", field="pool_source")

    def close(self) -> None:
        self.__dict__.pop("array", None)


class HeapArena(Arena):
    kind = "heap"

    def __init__(self, nbytes: int):
        super().__init__()
        self.nbytes = nbytes
        self._mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20),
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self._mm.madvise(mmap.MADV_HUGEPAGE)
                self.hugepage_advice = True
            except OSError:  # a kernel without transparent hugepages
                self.hugepage_advice = False
        self.array = np.frombuffer(self._mm, dtype=np.uint8)
        self._base = self.array.ctypes.data
        libc = ctypes.CDLL(None, use_errno=True)
        self._mlock = libc.mlock
        self._mlock.argtypes = (ctypes.c_void_p, ctypes.c_size_t)

    def lock(self, offset: int, length: int) -> None:
        if self.lock_error is not None:
            return  # one refusal is enough: the rest would be refused as well
        if self._mlock(self._base + offset, length) != 0:
            err = ctypes.get_errno()
            self.lock_error = f"mlock: {os.strerror(err)}"
            log.warning("pool memory is not page-locked (%s); the GPU path would copy it", self.lock_error)
        else:
            self.locked_bytes += length

    def close(self) -> None:
        super().close()
        try:
            self._mm.close()  # unmaps, which also unlocks
        except BufferError:  # views still alive; the mapping goes with the last of them
            pass


def cuda_device(cupy: Any, kind: str) -> int:
    try:
        if int(cupy.cuda.runtime.getDeviceCount()) < 1:
            raise AllocatorUnavailable(f"{kind} pool memory needs a CUDA device; the runtime sees none",
                                       field="pool_source")
        return int(cupy.cuda.Device().id)
    except AllocatorUnavailable:
        raise
    except Exception as exc:  # CUDARuntimeError: no driver, no device
        raise AllocatorUnavailable(f"{kind} pool memory needs a CUDA device ({type(exc).__name__}: {exc})",
                                   field="pool_source") from exc


class CudaArena(Arena):
    """Pinned (``cudaHostAlloc``) or managed (``cudaMallocManaged``) memory through CuPy."""

    def __init__(self, nbytes: int, kind: str, cupy: Any):
        super().__init__()
        self.kind, self.nbytes, self._cupy = kind, nbytes, cupy
        self.device_id = cuda_device(cupy, kind)
        rt = cupy.cuda.runtime
        if kind == "pinned":
            flags = getattr(rt, "hostAllocPortable", _HOST_ALLOC_PORTABLE) | getattr(rt, "hostAllocMapped",
                                                                                   _HOST_ALLOC_MAPPED)
            self._mem = cupy.cuda.pinned_memory.PinnedMemory(nbytes, flags)
        else:
            self._mem = cupy.cuda.memory.ManagedMemory(nbytes)
        self.locked_bytes = nbytes if kind == "pinned" else 0  # the driver pins pinned memory whole
        self.array = host_array(int(self._mem.ptr), nbytes, self._mem)

    def device_array(self, offset: int, nbytes: int, owner: Any) -> Any:
        cp = self._cupy
        mem = cp.cuda.UnownedMemory(int(self._mem.ptr) + offset, nbytes, owner, self.device_id)
        return cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))

    def close(self) -> None:
        super().close()
        self._mem = None  # freed once the last view of it is gone


def import_cupy() -> Any:
    """CuPy, or :class:`AllocatorUnavailable` saying why it cannot be imported."""
    try:
        import cupy  # noqa: PLC0415 - optional dependency
    except Exception as exc:
        raise AllocatorUnavailable(f"CUDA pool memory needs CuPy ({type(exc).__name__}: {exc}); "
                                   "install zapverify[cuda]", field="pool_source") from exc
    return cupy
