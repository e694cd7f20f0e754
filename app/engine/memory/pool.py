"""The UMA pool: one fixed block of memory the GPU can read, carved into slabs (docs/architecture.md, "Memory").

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
up to its timeout for a release, then raises :class:`app.core.errors.PoolExhausted` (counted).

The pool's planning (capacity, constants) is :mod:`app.engine.memory.plan`, its memory
sources :mod:`app.engine.memory.sources`, the heap fallback for engines without a pool
:mod:`app.engine.memory.heap`.  CuPy is imported only when a CUDA source is asked for.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from app.core.errors import AllocatorUnavailable, BufferMisuse, BufferTooLarge, ConfigError, PoolExhausted
from app.core.units import fmt_bytes
from app.engine.memory.plan import (
    CHUNK_BYTES,
    DEFAULT_POOL_BYTES,
    OWNERS,
    PAGE_BYTES,
    POISON,
    SLAB_CLASSES,
    PinLimits,
    check_request,
    plan_pool,
)
from app.engine.memory.sources import Arena, CudaArena, HeapArena, cuda_device, import_cupy

log = logging.getLogger("zapverify.pool")


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

    def __init__(self, arena: Arena, *, requested_bytes: int, clamped_by: tuple[str, ...] = (),
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
        check_request(requested_bytes, source)
        device_free = None
        if source != "heap":
            cupy = cupy or import_cupy()
            cuda_device(cupy, source)
            if source == "managed":
                device_free = int(cupy.cuda.runtime.memGetInfo()[0])
        plan = plan_pool(requested_bytes, source, limits, device_free)
        capacity, why = plan["capacity_bytes"], tuple(plan["clamped_by"])
        arena = HeapArena(capacity) if source == "heap" else CudaArena(capacity, source, cupy)
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
