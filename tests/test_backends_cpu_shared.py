"""Process chunks through shared memory: the same verdicts and leaves as the pipe, segments
reused and then unlinked, a full /dev/shm refused cleanly; and the chunk bounds."""

import errno
import os
import random
from multiprocessing.shared_memory import SharedMemory

import numpy as np
import pytest

from app.engine.backends import shared_columns
from app.engine.backends.cpu import TAIL_DIVISOR, CpuBackend, chunk_bounds
from app.engine.backends.shared_columns import GRANULE, SegmentPool, SharedBatch, read_chunk, shared_size
from app.engine.verify import kat
from app.engine.verify.batch import Batch
from app.engine.verify.schemes import SCHEMES


def _batch(scheme_id, items):
    return Batch.from_items(SCHEMES[scheme_id], [i.public_key for i in items], [i.message for i in items],
                            [i.signature for i in items], ctx=items[0].context)


def _exists(name: str) -> bool:
    try:
        SharedMemory(name).close()
    except FileNotFoundError:
        return False
    return True


def _mixed(scheme_id, n, seed):
    rng = random.Random(seed)
    # Messages of 0-200 bytes, every third item broken: no span may shift.
    items = kat.sign_items(scheme_id, n, seed=seed)
    return [kat.mutate(it, rng) if k % 3 == 2 else it for k, it in enumerate(items)]


def test_spans_read_back_as_the_batch_columns():
    rng = random.Random(5)
    n = 37
    pks = [rng.randbytes(32) for _ in range(n)]
    sigs = [rng.randbytes(64) for _ in range(n)]
    msgs = [rng.randbytes(rng.randrange(0, 300)) for _ in range(n)]
    batch = Batch.from_items(SCHEMES["ed25519"], pks, msgs, sigs)
    pool = SegmentPool()
    seg = pool.take(shared_size(batch))
    assert seg is not None and seg.size >= shared_size(batch) and seg.size % GRANULE == 0
    try:
        shared = SharedBatch(batch, seg)
        for lo, hi in [(0, 5), (5, 6), (6, 6), (6, n)]:
            got = read_chunk(seg.name, shared.spans(lo, hi))
            assert got == [b"".join(pks[lo:hi]), b"".join(sigs[lo:hi]), b"".join(msgs[lo:hi])]
    finally:
        pool.give(seg)
        pool.close()


def test_segments_are_reused_kept_within_bounds_and_unlinked_on_close():
    pool = SegmentPool(keep_bytes=3 * GRANULE)
    a = pool.take(10)
    assert a is not None and a.size == GRANULE
    pool.give(a)
    assert pool.take(GRANULE) is a  # the idle one, not a new one
    b = pool.take(2 * GRANULE + 1)
    assert b is not None and b.size == 3 * GRANULE
    pool.give(a)
    pool.give(b)  # 4 MiB idle > 3: the largest goes
    assert pool.idle_bytes() == GRANULE
    assert not _exists(b.name) and _exists(a.name)
    pool.close()
    assert not _exists(a.name) and pool.idle_bytes() == 0
    c = SegmentPool()
    late = c.take(1)
    c.close()
    c.give(late)  # returned after close (a batch that outlived it): unlinked at once
    assert not _exists(late.name)


def test_no_room_for_a_segment_is_a_no_not_a_crash(monkeypatch):
    made = []
    real = shared_columns.SharedMemory

    def spy(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shared_columns, "SharedMemory", spy)
    monkeypatch.setattr(shared_columns.os, "posix_fallocate", full)
    if not os.path.isdir(shared_columns.SHM_DIR):
        pytest.skip("no /dev/shm: segments are not reserved here")
    assert SegmentPool().take(1 << 20) is None
    assert made and not _exists(made[0].name)  # the half-made segment is unlinked


@pytest.mark.parametrize("scheme_id", ["ed25519", "ml-dsa-44"])
def test_shared_memory_pipe_and_threads_agree(scheme_id, monkeypatch):
    items = _mixed(scheme_id, 24, seed=7)
    batch = _batch(scheme_id, items)
    runs = {}
    for label, kwargs in [("threads", {"parallelism": "thread"}),
                          ("pipe", {"parallelism": "process", "shared_memory": False}),
                          ("shared", {"parallelism": "process"})]:
        backend = CpuBackend(workers=2, chunk=5, **kwargs)
        try:
            runs[label] = backend.verify_with_leaves(batch)
            if label == "shared":  # the batch went through a segment, which is kept for the next
                assert backend._segments.idle_bytes() >= shared_size(batch)
        finally:
            backend.close()
        assert backend._segments.idle_bytes() == 0
    verdicts, leaves = runs["threads"]
    assert verdicts.tolist() == [k % 3 != 2 for k in range(24)]
    for label in ("pipe", "shared"):
        assert np.array_equal(runs[label][0], verdicts) and np.array_equal(runs[label][1], leaves), label


def test_a_batch_without_a_segment_goes_through_the_pipe(monkeypatch):
    items = _mixed("ed25519", 12, seed=8)
    backend = CpuBackend(workers=2, chunk=4, parallelism="process")
    monkeypatch.setattr(backend._segments, "take", lambda size: None)
    try:
        assert backend.verify(_batch("ed25519", items)).tolist() == [k % 3 != 2 for k in range(12)]
    finally:
        backend.close()


@pytest.mark.parametrize("n,size,workers", [(4096, 116, 2), (100, 48, 2), (7, 1, 4), (1, 1, 1), (4096, 2048, 2),
                                            (1000, 300, 8)])
def test_chunk_bounds_cover_the_batch_and_shrink_at_the_end(n, size, workers):
    bounds = chunk_bounds(n, size, workers)
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # in order, no gap, no overlap
    sizes = [hi - lo for lo, hi in bounds]
    assert all(0 < s <= size for s in sizes)
    floor = max(1, size // TAIL_DIVISOR)
    assert sizes[:-1] == sorted(sizes[:-1], reverse=True)  # shrinking; only a remainder may be smaller
    if n >= 4 * workers * size:
        assert sizes[0] == size and min(sizes[:-1]) == floor  # full chunks, then down to the floor


def test_a_segment_that_would_leave_shm_less_than_half_free_is_refused(monkeypatch):
    if not os.path.isdir(shared_columns.SHM_DIR):
        pytest.skip("no /dev/shm here")
    free = __import__("shutil").disk_usage(shared_columns.SHM_DIR)
    pool = SegmentPool()
    assert pool.take(free.free - free.total // 2 + GRANULE) is None  # would leave under half free
    small = pool.take(1)
    assert small is not None
    pool.give(small)
    pool.close()
