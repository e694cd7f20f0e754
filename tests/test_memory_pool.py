"""UMA pool: slab classes, ownership, misuse, exhaustion, clamp, concurrency, CUDA sources."""

from __future__ import annotations

import ctypes
import random
import resource
import sys
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from app.core.errors import AllocatorUnavailable, BufferMisuse, BufferTooLarge, ConfigError, PoolExhausted
from app.engine.memory.heap import land
from app.engine.memory.plan import CHUNK_BYTES, DEFAULT_POOL_BYTES, OWNERS, POISON, PinLimits, clamp_capacity
from app.engine.memory.pool import PoolBuffer, UmaPool
from app.engine.memory.selftest import selftest_cuda
from app.engine.memory.sources import host_array

MIB = 1 << 20
#: Limits that clamp nothing, so a test gets the capacity it asks for.
NO_CLAMP = PinLimits(memlock_bytes=None, cap_ipc_lock=True, ram_bytes=1 << 40)


def make(capacity=8 * MIB, **kw) -> UmaPool:
    kw.setdefault("limits", NO_CLAMP)
    return UmaPool.create(capacity, "heap", **kw)


def _consistent(s: dict) -> None:
    by_class = sum(c["size_bytes"] * c["in_use"] for c in s["classes"])
    assert s["in_use_bytes"] == by_class + s["large"]["bytes"]
    assert s["in_use_bytes"] == sum(s["by_owner"].values())
    assert s["in_use_bytes"] <= s["reserved_bytes"] <= s["capacity_bytes"]
    assert s["reserved_bytes"] + s["free_chunk_bytes"] == s["capacity_bytes"]
    assert s["in_use_bytes"] <= s["high_water_bytes"] <= s["capacity_bytes"]
    assert s["acquired_total"] - s["released_total"] == s["buffers_in_use"]
    assert all(c["in_use"] <= c["slots"] for c in s["classes"])


# ------------------------------------------------------------------ classes and buffers
@pytest.mark.parametrize("nbytes, slot", [(1, 256), (256, 256), (257, 1024), (4096, 4096), (5000, 16384),
                                          (65536, 65536), (65537, MIB), (MIB, MIB), (MIB + 1, 2 * MIB),
                                          (3 * MIB, 3 * MIB)])
def test_size_classes(nbytes, slot):
    with make() as p, p.acquire(nbytes, "ingest") as buf:
        a = buf.array
        assert (a.dtype, a.shape, a.flags.writeable) == (np.uint8, (nbytes,), True)
        assert buf.slot_bytes == slot and buf.offset % 256 == 0
        a[:] = 7
        s = p.stats()
        assert s["in_use_bytes"] == slot and s["buffers_in_use"] == 1
        _consistent(s)


def test_buffers_are_views_of_the_arena():
    with make() as p:
        a, b = p.acquire(100, "ingest"), p.acquire(100, "ingest")
        assert b.offset - a.offset == 256  # next slot of the same slab
        assert b.address - a.address == 256
        a.array[:] = 1
        b.array[:] = 2
        assert not np.shares_memory(a.array, b.array)
        assert bytes(p._arena.array[a.offset:a.offset + 4]) == b"\x01" * 4


def test_slabs_grow_from_the_bottom_and_large_runs_from_the_top():
    with make(8 * MIB) as p:
        small = p.acquire(1000, "ingest")
        big = p.acquire(2 * MIB + 5, "ingest")
        assert small.offset < CHUNK_BYTES
        assert big.offset == 5 * MIB and big.slot_bytes == 3 * MIB


def test_empty_slabs_return_their_chunks():
    with make(4 * MIB) as p:
        bufs = [p.acquire(256, "ingest") for _ in range(CHUNK_BYTES // 256 + 1)]  # a full slab and one more
        assert p.stats()["reserved_bytes"] == 2 * MIB
        for b in bufs:
            b.release()
        s = p.stats()
        assert s["reserved_bytes"] == 0 and s["in_use_bytes"] == 0
        assert s["classes"][0]["acquired_total"] == len(bufs)
        with p.acquire(4 * MIB, "ingest", timeout=0):  # the whole arena is one free run again
            pass


def test_hand_off_moves_ownership():
    with make() as p:
        buf = p.acquire(3000, "ingest")
        assert buf.hand_off("dispatch", expected="ingest") is buf
        buf.hand_off("backend").hand_off("merkle").hand_off("store")
        assert buf.owner == "store" and p.stats()["by_owner"] == {
            "ingest": 0, "dispatch": 0, "backend": 0, "merkle": 0, "store": 4096}
        with pytest.raises(BufferMisuse, match="handed off by backend, but store owns it"):
            buf.hand_off("ingest", expected="backend")
        with pytest.raises(BufferMisuse, match="unknown pool owner"):
            buf.hand_off("somebody")
        buf.release()
        with pytest.raises(BufferMisuse, match="after release"):
            buf.hand_off("ingest")


def test_bad_requests():
    with make(2 * MIB) as p:
        for bad in (0, -1, 1.5, True, "10"):
            with pytest.raises(BufferMisuse) as err:
                p.acquire(bad, "ingest")
            assert err.value.field == "nbytes"
        with pytest.raises(BufferMisuse):
            p.acquire(10, "nobody")
        with pytest.raises(BufferTooLarge) as err:
            p.acquire(2 * MIB + 1, "ingest")
        assert err.value.code == "BUFFER_TOO_LARGE" and err.value.status == 413
        assert p.acquire(np.int64(10), "ingest").nbytes == 10


# ------------------------------------------------------------------ misuse
def test_use_after_release_raises():
    with make() as p:
        buf = p.acquire(10, "ingest")
        buf.release()
        assert buf.released
        with pytest.raises(BufferMisuse, match="used after release"):
            buf.array  # noqa: B018


def test_double_release_is_counted_outside_debug():
    with make() as p:
        buf = p.acquire(10, "ingest")
        buf.release()
        buf.release()
        s = p.stats()
        assert s["misuse_total"] == 1 and s["released_total"] == 1 and s["in_use_bytes"] == 0
        # the slot was not freed twice: two new buffers never share it
        a, b = p.acquire(10, "ingest"), p.acquire(10, "ingest")
        assert a.offset != b.offset


def test_double_release_raises_in_debug():
    with make(debug=True) as p:
        buf = p.acquire(10, "dispatch")
        buf.release()
        with pytest.raises(BufferMisuse, match="released twice"):
            buf.release()


def test_debug_poisons_released_memory_and_catches_stale_writes():
    with make(debug=True) as p:
        buf = p.acquire(1000, "backend")
        stale = buf.array
        stale[:] = 1
        buf.release()
        assert np.all(stale == POISON)
        stale[10] = 0  # a write through a view kept past release
        with pytest.raises(BufferMisuse, match="write after release detected at pool offset 10 .*backend"):
            p.acquire(1000, "ingest")
        s = p.stats()
        assert s["buffers_in_use"] == 0 and s["in_use_bytes"] == 0
        fresh = p.acquire(1000, "ingest")  # the slot was re-poisoned and is usable again
        assert fresh.offset == 0 and np.all(fresh.array == POISON)


# ------------------------------------------------------------------ exhaustion
def test_exhaustion_times_out_and_is_counted():
    with make(1 * MIB) as p:
        held = p.acquire(MIB, "ingest")
        with pytest.raises(PoolExhausted) as err:
            p.acquire(1, "ingest", timeout=0.05)
        assert err.value.code == "POOL_EXHAUSTED" and err.value.status == 503
        assert "no room for 1 bytes within 0.05 s" in err.value.message
        with pytest.raises(PoolExhausted):
            p.acquire(1, "ingest", timeout=0)
        s = p.stats()
        assert (s["exhaustions_total"], s["waits_total"], s["waiting"]) == (2, 1, 0)
        assert s["capacity_bytes"] == MIB  # never grew
        held.release()
        p.acquire(1, "ingest", timeout=0).release()


def test_waiter_gets_the_released_memory():
    with make(1 * MIB) as p:
        held = p.acquire(MIB, "ingest")
        got: list = []
        t = threading.Thread(target=lambda: got.append(p.acquire(MIB, "dispatch", timeout=60)))
        t.start()
        for _ in range(6000):  # until the thread is waiting (bounded; no timing asserted)
            if p.stats()["waiting"] == 1:
                break
            time.sleep(0.005)
        assert p.stats()["waiting"] == 1
        held.release()
        t.join(60)
        assert got and got[0].owner == "dispatch" and got[0].offset == 0
        s = p.stats()
        assert (s["waits_total"], s["exhaustions_total"]) == (1, 0)


def test_closed_pool_refuses():
    p = make()
    p.acquire(10, "ingest")
    p.close()
    with pytest.raises(AllocatorUnavailable):
        p.acquire(10, "ingest")


# ------------------------------------------------------------------ concurrency
@pytest.mark.parametrize("debug", [False, True])
def test_threads_never_get_overlapping_buffers(debug):
    capacity, threads, ops = 16 * MIB, 8, 150 if debug else 300
    p = make(capacity, debug=debug, wait_seconds=30)
    live: dict[int, tuple[int, int]] = {}
    reg = threading.Lock()
    errors: list[str] = []
    outcomes = {"acquired": 0, "exhausted": 0}
    snapshots: list[dict] = []

    def size(rng):
        kind = rng.random()
        if kind < 0.4:
            return rng.randint(1, 1024)
        if kind < 0.7:
            return rng.randint(1025, 65536)
        if kind < 0.9:
            return rng.randint(65537, MIB)
        return rng.randint(MIB + 1, 3 * MIB)

    def worker(seed):
        rng = random.Random(seed)
        held = []
        for i in range(ops):
            if held and (rng.random() < 0.45 or len(held) >= 3):
                buf, tag = held.pop(rng.randrange(len(held)))
                if not np.all(buf.array == tag):
                    errors.append(f"buffer at {buf.offset} was overwritten")
                with reg:
                    del live[id(buf)]
                buf.release()
                continue
            try:
                # only a thread holding nothing waits, so no thread waits while holding memory
                buf = p.acquire(size(rng), rng.choice(OWNERS), timeout=0 if held else 30)
            except PoolExhausted:
                with reg:
                    outcomes["exhausted"] += 1
                continue
            lo, hi = buf.offset, buf.offset + buf.slot_bytes
            with reg:
                outcomes["acquired"] += 1
                for other_lo, other_hi in live.values():
                    if lo < other_hi and other_lo < hi:
                        errors.append(f"[{lo},{hi}) overlaps [{other_lo},{other_hi})")
                live[id(buf)] = (lo, hi)
            tag = (seed * 31 + i) % 251
            buf.array[:] = tag
            held.append((buf, tag))
            if i % 50 == 0:
                snapshots.append(p.stats())
        for buf, tag in held:
            if not np.all(buf.array == tag):
                errors.append(f"buffer at {buf.offset} was overwritten")
            with reg:
                del live[id(buf)]
            buf.release()

    pool_threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(threads)]
    for t in pool_threads:
        t.start()
    for t in pool_threads:
        t.join(120)
    assert not any(t.is_alive() for t in pool_threads)
    assert errors == []
    for s in snapshots:
        _consistent(s)
    s = p.stats()
    _consistent(s)
    assert (s["in_use_bytes"], s["buffers_in_use"], s["reserved_bytes"]) == (0, 0, 0)
    assert s["acquired_total"] == s["released_total"] == outcomes["acquired"]
    assert s["exhaustions_total"] == outcomes["exhausted"]
    assert sum(c["acquired_total"] for c in s["classes"]) + s["large"]["acquired_total"] == outcomes["acquired"]
    assert 0 < s["high_water_bytes"] <= capacity and s["misuse_total"] == 0
    p.close()


# ------------------------------------------------------------------ capacity and clamp
def test_clamp_capacity():
    low = PinLimits(memlock_bytes=8 * MIB, cap_ipc_lock=False, ram_bytes=64 * 1024 * MIB)
    assert clamp_capacity(4 << 30, low) == (
        8 * MIB, ("RLIMIT_MEMLOCK 8.0 MiB (raise ulimit -l or grant CAP_IPC_LOCK)",))
    assert clamp_capacity(4 << 30, replace(low, cap_ipc_lock=True)) == (4 << 30, ())
    assert clamp_capacity(4 << 30, replace(low, memlock_bytes=None, ram_bytes=8 << 30)) == (
        2 << 30, ("a quarter of RAM (8.0 GiB)",))
    cap, why = clamp_capacity(4 << 30, NO_CLAMP, device_free=1 << 30)
    assert cap == int(0.9 * (1 << 30)) and why == ("90% of free device memory (1.0 GiB)",)


def test_default_is_the_seed_4_gib():
    assert DEFAULT_POOL_BYTES == 4 << 30
    with UmaPool.create(limits=NO_CLAMP) as p:  # an mmap reservation: pages are only touched when used
        assert p.capacity_bytes == 4 << 30 and p.n_chunks == 4096


def test_low_rlimit_memlock_clamps_the_pool():
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    low = 2 * MIB if hard == resource.RLIM_INFINITY or hard >= 2 * MIB else hard // 4096 * 4096
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (low, hard))
    try:
        limits = PinLimits.read()
        assert limits.memlock_bytes == low
        limits = replace(limits, cap_ipc_lock=False)  # as for a process without CAP_IPC_LOCK
        with UmaPool.create(64 * MIB, "heap", limits=limits) as p:
            s = p.stats()
            assert p.capacity_bytes == low == s["capacity_bytes"] and s["requested_bytes"] == 64 * MIB
            assert s["clamped_by"][0].startswith("RLIMIT_MEMLOCK")
            with p.acquire(low, "ingest"):
                pass
            mem = p.stats()["memory"]
            assert mem["locked_bytes"] == low or mem["lock_error"]
    finally:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))


def test_tiny_memlock_gives_small_chunks():
    limits = PinLimits(memlock_bytes=64 * 1024, cap_ipc_lock=False, ram_bytes=None)
    with UmaPool.create(4 << 30, "heap", limits=limits) as p:
        assert (p.capacity_bytes, p.chunk_bytes, p.classes[-1]) == (65536, 65536, 65536)
        p.acquire(65536, "ingest").release()
        with pytest.raises(BufferTooLarge):
            p.acquire(65537, "ingest")
    with pytest.raises(ConfigError) as err:
        UmaPool.create(4 << 30, "heap", limits=replace(limits, memlock_bytes=1000))
    assert err.value.field == "uma_pool_bytes" and "ulimit -l" in err.value.message


def test_bad_settings():
    for bad in (0, 100, "4G", 1.5):
        with pytest.raises(ConfigError):
            UmaPool.create(bad, "heap", limits=NO_CLAMP)
    with pytest.raises(ConfigError) as err:
        UmaPool.create(MIB, "gpu", limits=NO_CLAMP)
    assert err.value.field == "pool_source"


def test_heap_memory_reports_lock_and_hugepage_advice():
    with make(4 * MIB) as p:
        p.acquire(10, "ingest")
        mem = p.stats()["memory"]
        assert mem["kind"] == "heap"
        assert mem["locked_bytes"] == CHUNK_BYTES or mem["lock_error"].startswith("mlock: ")
        if sys.platform == "linux":
            assert mem["hugepage_advice"] in (True, False)


# ------------------------------------------------------------------ CUDA sources
def test_host_array_keeps_its_owner_alive():
    owner = (ctypes.c_uint8 * 64)()
    a = host_array(ctypes.addressof(owner), 64, owner)
    a[:] = 9
    assert a.base.owner is owner and bytes(owner) == b"\x09" * 64


class _HostBacked:
    """Memory with a ``ptr``, as CuPy's PinnedMemory / ManagedMemory have, backed by host bytes."""

    allocations: list = []

    def __init__(self, size, flags=None):
        self._buf = (ctypes.c_uint8 * size)()
        self.ptr, self.size, self.flags = ctypes.addressof(self._buf), size, flags
        _HostBacked.allocations.append(self)


def _cuda_like(free=64 * MIB, devices=1):
    rt = SimpleNamespace(getDeviceCount=lambda: devices, memGetInfo=lambda: (free, 80 << 30),
                         hostAllocPortable=1, hostAllocMapped=2)
    return SimpleNamespace(cuda=SimpleNamespace(
        runtime=rt, Device=lambda *a: SimpleNamespace(id=0),
        pinned_memory=SimpleNamespace(PinnedMemory=_HostBacked), memory=SimpleNamespace(ManagedMemory=_HostBacked)))


def test_pinned_source_allocates_once_portable_and_mapped():
    _HostBacked.allocations.clear()
    with UmaPool.create(8 * MIB, "pinned", limits=NO_CLAMP, cupy=_cuda_like()) as p:
        assert [(m.size, m.flags) for m in _HostBacked.allocations] == [(8 * MIB, 3)]
        with p.acquire(5000, "ingest") as buf:
            buf.array[:] = 3
            assert buf.address == _HostBacked.allocations[0].ptr + buf.offset
        mem = p.stats()["memory"]
        assert (mem["kind"], mem["locked_bytes"], mem["device_id"]) == ("pinned", 8 * MIB, 0)


def test_managed_source_never_exceeds_free_device_memory():
    _HostBacked.allocations.clear()
    with UmaPool.create(4 << 30, "managed", limits=NO_CLAMP, cupy=_cuda_like(free=10 * MIB)) as p:
        assert p.capacity_bytes == 9 * MIB  # 90 % of 10 MiB, whole chunks
        assert [(m.size, m.flags) for m in _HostBacked.allocations] == [(9 * MIB, None)]
        assert p.stats()["clamped_by"] == ["90% of free device memory (10.0 MiB)"]
        with pytest.raises(AllocatorUnavailable, match="not visible to a GPU|device"):
            make().acquire(10, "ingest").device_array()


def test_cuda_source_without_a_device():
    with pytest.raises(AllocatorUnavailable, match="runtime sees none"):
        UmaPool.create(MIB, "pinned", limits=NO_CLAMP, cupy=_cuda_like(devices=0))


def test_cuda_source_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(AllocatorUnavailable, match="install zapverify\\[cuda\\]") as err:
        UmaPool.create(MIB, "pinned", limits=NO_CLAMP)
    assert err.value.field == "pool_source"
    with pytest.raises(AllocatorUnavailable):
        selftest_cuda()


# ------------------------------------------------------------------ landing (pool or heap)
def test_land_takes_pool_buffers_or_heap_ones_with_the_same_ownership_rules():
    with make() as p:
        buf = land(p, 300, "ingest", timeout=0)
        assert isinstance(buf, PoolBuffer) and buf.slot_bytes == 1024 and buf.owner == "ingest"
        buf.release()
    heap = land(None, 300)
    assert heap.array.shape == (300,) and heap.owner == "ingest"
    heap.hand_off("dispatch", expected="ingest").hand_off("backend")
    with pytest.raises(BufferMisuse):
        heap.hand_off("store", expected="dispatch")
    with pytest.raises(BufferMisuse):
        heap.hand_off("nobody")
    heap.release()
    assert heap.released
    with pytest.raises(BufferMisuse):
        heap.array  # noqa: B018


def test_land_does_not_wait_with_timeout_zero():
    with make(1 * MIB) as p:
        big = p.acquire(MIB, "ingest")
        t0 = time.monotonic()
        with pytest.raises(PoolExhausted):
            land(p, 100, timeout=0)
        assert time.monotonic() - t0 < 5  # generous: only that it did not wait for the 1 s default
        big.release()
