"""The UMA pool: one fixed block of memory the GPU can read, carved into slabs (DESIGN.md section 7).

Every byte that arrives (a ZAP frame, a JSON batch's columns) lands in a buffer of this
pool, and the verify kernels read it in place.  The pool is one *arena* allocated once from
a memory source, then never grown:

* ``pinned``  — CUDA page-locked host memory (``cudaHostAlloc``, portable and mapped), which a
  kernel reads over PCIe/C2C through the same pointer (unified virtual addressing).  The
  default on CUDA hosts.
* ``managed`` — CUDA managed memory (``cudaMallocManaged``): one address for host and device,
  the right choice where host and GPU share physical memory (GB10).  Never more than 90 % of
  what the device has free, so kernels keep room for their own allocations.
* ``heap``    — anonymous ``mmap`` with transparent-hugepage advice; each chunk is ``mlock``-ed
  when first used (the attempt and its outcome are reported).  Hosts without a GPU.

The arena is cut into chunks of 1 MiB (less when the whole pool is smaller).  A chunk becomes
a slab of one size class (256 B, 1 KiB, 4 KiB, 16 KiB, 64 KiB, 1 MiB) when a class needs
room, and goes back to the free chunks when its last slot is released; larger requests get
a run of contiguous chunks of their own, taken from the top of the arena so that slabs
(from the bottom) and large runs fragment each other less.

Capacity is ``ZAP_UMA_POOL_BYTES`` (4 GiB by default, as in the seed), clamped to what the
host can page-lock: ``RLIMIT_MEMLOCK`` (unless the process has ``CAP_IPC_LOCK``, which lifts
it, see mlock(2)) and a quarter of RAM; the effective size and what clamped it are reported.

Buffers carry an owner tag (:data:`OWNERS`) passed on with :meth:`PoolBuffer.hand_off` and
end with :meth:`PoolBuffer.release`.  When the pool has no room, :meth:`UmaPool.acquire` waits
up to its timeout for a release, then raises :class:`app.errors.PoolExhausted` (counted).

This module imports only the standard library and numpy; CuPy is imported when a CUDA
source is asked for.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.engine.host.probe import CAP_IPC_LOCK, parse_cap_bits
from app.errors import AllocatorUnavailable, BufferMisuse, BufferTooLarge, ConfigError, PoolExhausted

log = logging.getLogger("zapverify.pool")

SLAB_CLASSES = (256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 1 << 20)
CHUNK_BYTES = 1 << 20
PAGE_BYTES = mmap.PAGESIZE
DEFAULT_POOL_BYTES = 4 << 30
#: Share of the device's free memory managed memory may take.
MANAGED_FREE_FRACTION = 0.9
OWNERS = ("ingest", "dispatch", "backend", "merkle", "store")
SOURCES = ("pinned", "managed", "heap")
#: Byte written over released memory in debug mode; a stale write shows up as a non-poison byte.
POISON = 0xA5

# cudaHostAlloc flags (cuda_runtime_api.h), used when the CuPy build does not export them.
_HOST_ALLOC_PORTABLE = 0x01
_HOST_ALLOC_MAPPED = 0x02


def fmt_bytes(n: int | None) -> str:
    """``n`` bytes in binary units (``4.0 GiB``, ``512 B``); ``?`` for None."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


# ------------------------------------------------------------------------------ capacity
@dataclass(frozen=True)
class PinLimits:
    """What bounds the memory this process may page-lock.

    Attributes:
        memlock_bytes: the soft ``RLIMIT_MEMLOCK`` in bytes; None when unlimited.
        cap_ipc_lock: whether the process holds ``CAP_IPC_LOCK`` (lifts the rlimit).
        ram_bytes: physical memory in bytes; None when unknown.
    """

    memlock_bytes: int | None
    cap_ipc_lock: bool
    ram_bytes: int | None

    @classmethod
    def read(cls) -> PinLimits:
        """The limits of this process, from getrlimit(2), /proc/self/status and sysconf(3)."""
        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        try:
            with open("/proc/self/status") as f:
                bits = parse_cap_bits(f.read())
        except OSError:
            bits = None
        try:
            ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            ram = None
        return cls(None if soft == resource.RLIM_INFINITY else int(soft),
                   bool(bits is not None and bits >> CAP_IPC_LOCK & 1), ram)


def clamp_capacity(requested: int, limits: PinLimits, device_free: int | None = None) -> tuple[int, tuple[str, ...]]:
    """The pool size the host can honour, in bytes, and what clamped it (in words).

    ``device_free`` (bytes) is given for managed memory only; the result is then also at
    most :data:`MANAGED_FREE_FRACTION` of it.
    """
    capacity, why = requested, []
    if limits.memlock_bytes is not None and not limits.cap_ipc_lock and limits.memlock_bytes < capacity:
        capacity = limits.memlock_bytes
        why.append(f"RLIMIT_MEMLOCK {fmt_bytes(limits.memlock_bytes)} (raise ulimit -l or grant CAP_IPC_LOCK)")
    if limits.ram_bytes is not None and limits.ram_bytes // 4 < capacity:
        capacity = limits.ram_bytes // 4
        why.append(f"a quarter of RAM ({fmt_bytes(limits.ram_bytes)})")
    if device_free is not None and int(device_free * MANAGED_FREE_FRACTION) < capacity:
        capacity = int(device_free * MANAGED_FREE_FRACTION)
        why.append(f"{MANAGED_FREE_FRACTION:.0%} of free device memory ({fmt_bytes(device_free)})")
    return capacity, tuple(why)


def _check_request(requested_bytes: Any, source: Any) -> None:
    if isinstance(requested_bytes, bool) or not isinstance(requested_bytes, int) or requested_bytes < PAGE_BYTES:
        raise ConfigError(f"uma_pool_bytes must be an integer of at least {PAGE_BYTES}, got {requested_bytes!r}",
                          field="uma_pool_bytes")
    if source not in SOURCES:
        raise ConfigError(f"pool_source must be one of {', '.join(SOURCES)}, got {source!r}", field="pool_source")


def plan_pool(requested_bytes: int, source: str, limits: PinLimits | None = None,
              device_free: int | None = None) -> dict[str, Any]:
    """The pool :meth:`UmaPool.create` would build, without allocating it.

    Returns ``{"source", "requested_bytes", "capacity_bytes", "chunk_bytes", "clamped_by"}``
    (bytes; ``clamped_by`` in words).  ``device_free``: free device memory in bytes, for
    ``managed``.  Raises :class:`ConfigError` for a bad size or source, or when the host
    lets the process page-lock less than one page.
    """
    _check_request(requested_bytes, source)
    capacity, why = clamp_capacity(requested_bytes, limits or PinLimits.read(),
                                   device_free if source == "managed" else None)
    chunk = min(CHUNK_BYTES, capacity // PAGE_BYTES * PAGE_BYTES)
    if chunk < PAGE_BYTES:
        raise ConfigError(f"the host lets this process page-lock only {capacity} bytes "
                          f"({'; '.join(why)}); the pool needs at least {PAGE_BYTES}", field="uma_pool_bytes")
    return {"source": source, "requested_bytes": requested_bytes, "capacity_bytes": capacity // chunk * chunk,
            "chunk_bytes": chunk, "clamped_by": list(why)}


# ------------------------------------------------------------------------------ memory sources
class _HostMemory:
    """Exposes ``nbytes`` at address ``ptr`` to numpy, keeping ``owner`` (the allocation) alive
    for as long as any view of it exists."""

    def __init__(self, ptr: int, nbytes: int, owner: Any):
        self.owner = owner
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def host_array(ptr: int, nbytes: int, owner: Any) -> np.ndarray:
    """``uint8[nbytes]`` view of memory at ``ptr``; the view holds a reference to ``owner``."""
    return np.asarray(_HostMemory(ptr, nbytes, owner))


class _Arena:
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


class _HeapArena(_Arena):
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


def _cuda_device(cupy: Any, kind: str) -> int:
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


class _CudaArena(_Arena):
    """Pinned (``cudaHostAlloc``) or managed (``cudaMallocManaged``) memory through CuPy."""

    def __init__(self, nbytes: int, kind: str, cupy: Any):
        super().__init__()
        self.kind, self.nbytes, self._cupy = kind, nbytes, cupy
        self.device_id = _cuda_device(cupy, kind)
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


# ------------------------------------------------------------------------------ buffers
class PoolBuffer:
    """A buffer of the pool: ``array`` is a ``uint8[nbytes]`` numpy view of pool memory.

    Attributes:
        offset: byte offset of the buffer in the pool's arena (multiple of 256).
        nbytes: the size asked for, bytes.
        slot_bytes: the bytes it holds in the pool (its size class, or whole chunks).

    Use as a context manager, or call :meth:`release` exactly once.  Touching :attr:`array`
    after release raises :class:`BufferMisuse`; so does a second release in debug mode
    (outside it, a second release is ignored and counted in ``misuse_total``).
    """

    __slots__ = ("_pool", "_key", "offset", "nbytes", "slot_bytes", "_owner", "_released", "_array")

    def __init__(self, pool: UmaPool, key: tuple, offset: int, nbytes: int, slot_bytes: int, owner: str):
        self._pool, self._key, self.offset, self.nbytes, self.slot_bytes = pool, key, offset, nbytes, slot_bytes
        self._owner, self._released = owner, False
        self._array = pool._arena.array[offset:offset + nbytes]

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def released(self) -> bool:
        return self._released

    @property
    def array(self) -> np.ndarray:
        """``uint8[nbytes]`` view of the buffer; raises :class:`BufferMisuse` after release."""
        if self._released:
            raise BufferMisuse(f"pool buffer at offset {self.offset} used after release by {self._owner}",
                               field="buffer")
        return self._array

    @property
    def address(self) -> int:
        """Host address of the first byte (also the device address for pinned/managed memory)."""
        return int(self.array.ctypes.data)

    def device_array(self) -> Any:
        """A CuPy ``uint8[nbytes]`` array over the same memory (no copy); pinned/managed pools only.

        Raises :class:`AllocatorUnavailable` for heap memory, :class:`BufferMisuse` after release.
        """
        self.array  # noqa: B018 - raises after release
        return self._pool._arena.device_array(self.offset, self.nbytes, self)

    def hand_off(self, to: str, *, expected: str | None = None) -> PoolBuffer:
        """Pass the buffer to owner ``to`` (one of :data:`OWNERS`); returns ``self``.

        ``expected``, when given, must be the current owner.  Raises :class:`BufferMisuse`
        for a released buffer, an unknown owner, or an owner other than ``expected``.
        """
        self._pool._hand_off(self, to, expected)
        return self

    def release(self) -> None:
        """Give the memory back to the pool (see the class doc for a second release)."""
        self._pool._release(self)

    def __enter__(self) -> PoolBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._released:
            self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else self._owner
        return f"<PoolBuffer {self.nbytes} B at {self.offset} ({self.slot_bytes} B slot) {state}>"


class _Slab:
    __slots__ = ("cls", "slots", "free")

    def __init__(self, cls: int, slots: int):
        self.cls, self.slots = cls, slots
        self.free = list(range(slots - 1, -1, -1))  # pop() hands out slot 0 first


# ------------------------------------------------------------------------------ the pool
class UmaPool:
    """A fixed-capacity slab pool over one arena (see the module doc).  Thread-safe.

    Build one with :meth:`create`.  ``wait_seconds`` is how long :meth:`acquire` waits for
    room by default; ``debug`` turns on poisoning of released memory and raising on misuse.
    """

    def __init__(self, arena: _Arena, *, requested_bytes: int, clamped_by: tuple[str, ...] = (),
                 wait_seconds: float = 1.0, debug: bool = False):
        self._arena = arena
        self.source = arena.kind
        self.requested_bytes = requested_bytes
        self.clamped_by = clamped_by
        self.wait_seconds = wait_seconds
        self.debug = debug
        self.chunk_bytes = min(CHUNK_BYTES, arena.nbytes // PAGE_BYTES * PAGE_BYTES)
        if self.chunk_bytes < PAGE_BYTES:
            raise ConfigError(f"a pool of {arena.nbytes} bytes is smaller than one page", field="uma_pool_bytes")
        self.n_chunks = arena.nbytes // self.chunk_bytes
        self.capacity_bytes = self.n_chunks * self.chunk_bytes
        self.classes = tuple(c for c in SLAB_CLASSES if c <= self.chunk_bytes)

        self._cond = threading.Condition(threading.Lock())
        self._free_chunks = np.ones(self.n_chunks, dtype=bool)
        self._touched = np.zeros(self.n_chunks, dtype=bool)
        self._slabs: dict[int, _Slab] = {}
        self._partial: list[dict[int, None]] = [{} for _ in self.classes]  # slabs with a free slot, by class
        self._large: dict[int, int] = {}  # first chunk -> chunk count
        self._last_owner: dict[int, str] = {}  # offset -> owner that released it (debug)
        self._closed = False
        # stats
        self._in_use = self._high_water = self._buffers = 0
        self._class_in_use = [0] * len(self.classes)
        self._class_acquired = [0] * len(self.classes)
        self._large_in_use = self._large_bytes = self._large_acquired = 0
        self._by_owner = dict.fromkeys(OWNERS, 0)
        self._acquired = self._released = self._waits = self._waiting = self._exhaustions = self._misuse = 0

    # -------------------------------------------------------------- construction
    @classmethod
    def create(cls, requested_bytes: int = DEFAULT_POOL_BYTES, source: str = "heap", *,
               wait_seconds: float = 1.0, debug: bool = False, limits: PinLimits | None = None,
               cupy: Any = None) -> UmaPool:
        """Allocate the arena and build the pool.

        Args:
            requested_bytes: ``ZAP_UMA_POOL_BYTES``; clamped by :func:`clamp_capacity`, then
                rounded down to whole chunks.
            source: ``pinned``, ``managed`` or ``heap`` (see the module doc).
            wait_seconds: default wait of :meth:`acquire` for room, seconds.
            debug: poison released memory and raise on misuse.
            limits: page-lock limits; read from the process by default.
            cupy: the CuPy module for the CUDA sources; imported when None.

        Raises:
            ConfigError: a bad size or source name.
            AllocatorUnavailable: a CUDA source without CuPy or a device.
        """
        if wait_seconds < 0:
            raise ConfigError("pool_wait_seconds must not be negative", field="pool_wait_seconds")
        _check_request(requested_bytes, source)
        device_free = None
        if source != "heap":
            cupy = cupy or import_cupy()
            _cuda_device(cupy, source)
            if source == "managed":
                device_free = int(cupy.cuda.runtime.memGetInfo()[0])
        plan = plan_pool(requested_bytes, source, limits, device_free)
        capacity, why = plan["capacity_bytes"], tuple(plan["clamped_by"])
        arena = _HeapArena(capacity) if source == "heap" else _CudaArena(capacity, source, cupy)
        pool = cls(arena, requested_bytes=requested_bytes, clamped_by=why, wait_seconds=wait_seconds, debug=debug)
        log.info("UMA pool: %s memory, %s (asked %s%s)", source, fmt_bytes(pool.capacity_bytes),
                 fmt_bytes(requested_bytes), f"; clamped by {', '.join(why)}" if why else "")
        return pool

    # -------------------------------------------------------------- acquire / release
    def _class_of(self, nbytes: int) -> int | None:
        for i, size in enumerate(self.classes):
            if nbytes <= size:
                return i
        return None

    def _take_chunks(self, k: int, low: bool) -> int | None:
        """First chunk of ``k`` contiguous free chunks (lowest for slabs, highest for large runs)."""
        free = self._free_chunks
        if k == 1 and low:
            i = int(np.argmax(free))
            start = i if free[i] else None
        else:
            edges = np.diff(np.concatenate(([0], free.view(np.int8), [0])))
            starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
            fits = np.flatnonzero(ends - starts >= k)
            if fits.size == 0:
                return None
            start = int(starts[fits[0]]) if low else int(ends[fits[-1]]) - k
        if start is None:
            return None
        free[start:start + k] = False
        fresh = ~self._touched[start:start + k]
        if fresh.any():  # first use of these chunks: lock them, and poison them in debug mode
            self._touched[start:start + k] = True
            for j in np.flatnonzero(fresh) + start:
                off = int(j) * self.chunk_bytes
                self._arena.lock(off, self.chunk_bytes)
                if self.debug:
                    self._arena.array[off:off + self.chunk_bytes].fill(POISON)
        return start

    def _try_alloc(self, nbytes: int) -> tuple[tuple, int, int] | None:
        ci = self._class_of(nbytes)
        if ci is not None:
            size = self.classes[ci]
            partial = self._partial[ci]
            if partial:
                chunk = next(iter(partial))
                slab = self._slabs[chunk]
            else:
                taken = self._take_chunks(1, low=True)
                if taken is None:
                    return None
                chunk = taken
                slab = self._slabs[chunk] = _Slab(ci, self.chunk_bytes // size)
                partial[chunk] = None
            slot = slab.free.pop()
            if not slab.free:
                del partial[chunk]
            return ("slab", ci, chunk, slot), chunk * self.chunk_bytes + slot * size, size
        k = -(-nbytes // self.chunk_bytes)
        start = self._take_chunks(k, low=False)
        if start is None:
            return None
        self._large[start] = k
        return ("large", start, k), start * self.chunk_bytes, k * self.chunk_bytes

    def _free(self, key: tuple) -> None:
        if key[0] == "slab":
            _, ci, chunk, slot = key
            slab = self._slabs[chunk]
            slab.free.append(slot)
            if len(slab.free) == slab.slots:  # empty: the chunk goes back for any class or run
                self._partial[ci].pop(chunk, None)
                del self._slabs[chunk]
                self._free_chunks[chunk] = True
            elif len(slab.free) == 1:
                self._partial[ci][chunk] = None
        else:
            _, start, k = key
            del self._large[start]
            self._free_chunks[start:start + k] = True

    def acquire(self, nbytes: int, owner: str, *, timeout: float | None = None) -> PoolBuffer:
        """A buffer of at least ``nbytes`` bytes owned by ``owner`` (one of :data:`OWNERS`).

        Waits up to ``timeout`` seconds (default: the pool's ``wait_seconds``) for room.

        Raises:
            PoolExhausted: no room within the timeout (counted in ``exhaustions_total``).
            BufferTooLarge: ``nbytes`` exceeds the pool's capacity.
            BufferMisuse: ``nbytes`` < 1 or an unknown owner.
            AllocatorUnavailable: the pool is closed.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 1:
            raise BufferMisuse(f"a pool buffer needs a positive integer size, got {nbytes!r}", field="nbytes")
        nbytes = int(nbytes)
        if owner not in OWNERS:
            raise BufferMisuse(f"unknown pool owner {owner!r}; one of {', '.join(OWNERS)}", field="owner")
        if nbytes > self.capacity_bytes:
            raise BufferTooLarge(f"a buffer of {nbytes} bytes exceeds the UMA pool's capacity of "
                                 f"{self.capacity_bytes} bytes", field="nbytes")
        timeout = self.wait_seconds if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._closed:
                raise AllocatorUnavailable("the UMA pool is closed", field="pool")
            got = self._try_alloc(nbytes)
            if got is None:
                got = self._wait_for_room(nbytes, deadline, timeout)
            key, offset, slot_bytes = got
            self._in_use += slot_bytes
            self._high_water = max(self._high_water, self._in_use)
            self._buffers += 1
            self._acquired += 1
            if key[0] == "slab":
                self._class_in_use[key[1]] += 1
                self._class_acquired[key[1]] += 1
            else:
                self._large_in_use += 1
                self._large_bytes += slot_bytes
                self._large_acquired += 1
            self._by_owner[owner] += slot_bytes
            buf = PoolBuffer(self, key, offset, nbytes, slot_bytes, owner)
            if self.debug:
                self._check_poison(buf)
        return buf

    def _wait_for_room(self, nbytes: int, deadline: float, timeout: float) -> tuple[tuple, int, int]:
        if timeout > 0:
            self._waits += 1
            self._waiting += 1
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._exhaustions += 1
                    raise PoolExhausted(
                        f"UMA pool exhausted: no room for {nbytes} bytes within {timeout:g} s "
                        f"({fmt_bytes(self._in_use)} of {fmt_bytes(self.capacity_bytes)} in use in "
                        f"{self._buffers} buffers)", field="pool")
                self._cond.wait(remaining)
                got = self._try_alloc(nbytes)
                if got is not None:
                    return got
        finally:
            if timeout > 0:
                self._waiting -= 1

    def _check_poison(self, buf: PoolBuffer) -> None:
        """Debug: memory handed out must still hold the poison written at release."""
        region = self._arena.array[buf.offset:buf.offset + buf.slot_bytes]
        bad = np.flatnonzero(region != POISON)
        if bad.size:
            at = buf.offset + int(bad[0])
            last = self._last_owner.get(buf.offset, "an earlier owner")
            region.fill(POISON)
            self._unaccount(buf)
            self._free(buf._key)
            buf._released = True
            raise BufferMisuse(f"write after release detected at pool offset {at} (memory last released by "
                               f"{last})", field="buffer")

    def _unaccount(self, buf: PoolBuffer) -> None:
        self._in_use -= buf.slot_bytes
        self._buffers -= 1
        self._by_owner[buf._owner] -= buf.slot_bytes
        if buf._key[0] == "slab":
            self._class_in_use[buf._key[1]] -= 1
        else:
            self._large_in_use -= 1
            self._large_bytes -= buf.slot_bytes

    def _release(self, buf: PoolBuffer) -> None:
        with self._cond:
            if buf._released:
                self._misuse += 1
                if self.debug:
                    raise BufferMisuse(f"pool buffer at offset {buf.offset} released twice (owner {buf._owner})",
                                       field="buffer")
                log.warning("pool buffer at offset %d released twice (owner %s); ignored", buf.offset, buf._owner)
                return
            buf._released = True
            if self.debug:
                self._arena.array[buf.offset:buf.offset + buf.slot_bytes].fill(POISON)
                self._last_owner[buf.offset] = buf._owner
            self._unaccount(buf)
            self._released += 1
            self._free(buf._key)
            self._cond.notify_all()

    def _hand_off(self, buf: PoolBuffer, to: str, expected: str | None) -> None:
        if to not in OWNERS:
            raise BufferMisuse(f"unknown pool owner {to!r}; one of {', '.join(OWNERS)}", field="owner")
        with self._cond:
            if buf._released:
                self._misuse += 1
                raise BufferMisuse(f"pool buffer at offset {buf.offset} handed to {to} after release",
                                   field="buffer")
            if expected is not None and buf._owner != expected:
                self._misuse += 1
                raise BufferMisuse(f"pool buffer at offset {buf.offset} handed off by {expected}, "
                                   f"but {buf._owner} owns it", field="owner")
            self._by_owner[buf._owner] -= buf.slot_bytes
            self._by_owner[to] += buf.slot_bytes
            buf._owner = to

    # -------------------------------------------------------------- reporting / life cycle
    def stats(self) -> dict[str, Any]:
        """A consistent snapshot: capacity, use, high water, per class, waits, exhaustions (bytes, counts)."""
        with self._cond:
            classes = []
            for i, size in enumerate(self.classes):
                slabs = [s for s in self._slabs.values() if s.cls == i]
                classes.append({"size_bytes": size, "slabs": len(slabs), "slots": sum(s.slots for s in slabs),
                                "in_use": self._class_in_use[i], "acquired_total": self._class_acquired[i]})
            free_chunks = int(np.count_nonzero(self._free_chunks))
            return {
                "source": self.source, "requested_bytes": self.requested_bytes,
                "capacity_bytes": self.capacity_bytes, "clamped_by": list(self.clamped_by),
                "chunk_bytes": self.chunk_bytes, "in_use_bytes": self._in_use,
                "reserved_bytes": (self.n_chunks - free_chunks) * self.chunk_bytes,
                "free_chunk_bytes": free_chunks * self.chunk_bytes, "high_water_bytes": self._high_water,
                "buffers_in_use": self._buffers, "classes": classes,
                "large": {"in_use": self._large_in_use, "bytes": self._large_bytes,
                          "acquired_total": self._large_acquired},
                "by_owner": dict(self._by_owner), "acquired_total": self._acquired,
                "released_total": self._released, "waits_total": self._waits, "waiting": self._waiting,
                "exhaustions_total": self._exhaustions, "misuse_total": self._misuse,
                "wait_seconds": self.wait_seconds, "debug": self.debug, "memory": self._arena.info(),
            }

    def close(self) -> None:
        """Free the arena.  Buffers still out keep their memory alive until they are dropped."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            if self._buffers:
                log.warning("UMA pool closed with %d buffers in use", self._buffers)
            self._cond.notify_all()
        self._arena.close()

    def __enter__(self) -> UmaPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------ landing
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


# ------------------------------------------------------------------------------ GPU self-test
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
