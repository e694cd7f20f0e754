"""Process chunks through shared memory: the same verdicts and leaves as the pipe and the
threads, segments reused and then unlinked, a full /dev/shm refused cleanly, a segment
removed under the server answered through the pipe."""

import errno
import os
import random
import shutil
import subprocess
import sys
import threading
import uuid
from multiprocessing.shared_memory import SharedMemory

import numpy as np
import pytest

from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.backends import shared_columns
from app.engine.backends.cpu import CpuBackend
from app.engine.backends.shared_columns import GRANULE, Claims, SegmentPool, SharedBatch, chunk_views, shared_size
from app.engine.reference import kat


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


def _expected(n):
    return [k % 3 != 2 for k in range(n)]


def test_workers_claim_every_item_once_and_write_back_in_place(monkeypatch):
    rng = random.Random(5)
    n = 37
    pks = [rng.randbytes(32) for _ in range(n)]
    sigs = [rng.randbytes(64) for _ in range(n)]
    msgs = [rng.randbytes(rng.randrange(0, 300)) for _ in range(n)]
    batch = Batch.from_items(SCHEMES["ed25519"], pks, msgs, sigs)
    monkeypatch.setattr(shared_columns, "PIECE_BYTES", 1000)  # about 3 items a piece: many releases
    lock = threading.Lock()  # the pool's is a multiprocessing lock; here one process plays both sides
    pool = SegmentPool()
    seg = pool.take(shared_size(batch))
    assert seg is not None and seg.size >= shared_size(batch) and seg.size % GRANULE == 0
    try:
        shared = SharedBatch(batch, seg)
        claims = Claims(shared.name, shared.layout)
        first: list = []
        early = threading.Thread(target=lambda: first.append(claims.claim(lock, 4, 2)))
        early.start()  # nothing copied in yet: it waits for the first piece
        early.join(0.05)
        assert early.is_alive() and not first
        shared.fill(lock)
        early.join()
        spans = first + list(iter(lambda: claims.claim(lock, 4, 2), None))
        assert [lo for lo, _ in spans] == [0] + [hi for _, hi in spans[:-1]] and spans[-1][1] == n
        sizes = [hi - lo for lo, hi in spans[1:]]
        assert sizes == sorted(sizes, reverse=True) and min(sizes[:-1]) >= 4  # guided: shrinking, not below 4
        for lo, hi in spans:
            k_pks, k_sigs, k_msgs, offsets = (bytes(c) if i < 3 else c for i, c in enumerate(claims.chunk(lo, hi)))
            assert (k_pks, k_sigs) == (b"".join(pks[lo:hi]), b"".join(sigs[lo:hi]))
            assert [k_msgs[a:z] for a, z in zip(offsets, offsets[1:])] == msgs[lo:hi]
            claims.put(lo, hi, bytes([lo % 2] * (hi - lo)), bytes(range(lo, hi)) * 32)
        verdicts, leaves = shared.results()
        assert list(verdicts) == [lo % 2 for lo, hi in spans for _ in range(lo, hi)]
        assert leaves == b"".join(bytes(range(lo, hi)) * 32 for lo, hi in spans)

        stopped = SharedBatch(batch, seg)  # the segment again, for a batch the server gave up on
        stopped.stop()
        assert Claims(stopped.name, stopped.layout).claim(lock, 1, 2) is None
        with pytest.raises(ValueError, match="segment of"):
            SharedBatch(Batch.from_items(SCHEMES["ed25519"], pks * 10**4, msgs * 10**4, sigs * 10**4), seg)
    finally:
        claims = None  # its views of the mapping go with it
        shared_columns._mapped.pop(seg.name).close()
        pool.give(seg)
        pool.close()


def test_a_claim_lock_held_for_ever_fails_the_copy_instead_of_hanging_it(monkeypatch):
    # As when a worker is killed holding it: the pool is broken, and the server must notice.
    monkeypatch.setattr(shared_columns, "LOCK_SECONDS", 0.05)
    batch = _batch("ed25519", kat.sign_items("ed25519", 3, seed=1))
    pool = SegmentPool()
    seg = pool.take(shared_size(batch))
    assert seg is not None
    lock = threading.Lock()
    lock.acquire()
    try:
        with pytest.raises(TimeoutError, match="claim lock"):
            SharedBatch(batch, seg).fill(lock)
    finally:
        pool.give(seg)
        pool.close()


def test_a_worker_keeps_the_most_recent_segments_mapped():
    pool = SegmentPool()
    segs = [pool.take(1) for _ in range(shared_columns.WORKER_MAPS + 2)]
    try:
        for seg in segs:
            seg.buf[:3] = seg.name.encode()[-3:]
            assert bytes(chunk_views(seg.name, ((0, 3),))[0]) == seg.name.encode()[-3:]
        assert list(shared_columns._mapped) == [s.name for s in segs[-shared_columns.WORKER_MAPS:]]
        chunk_views(segs[-4].name, ((0, 1),))  # used again: now the most recent
        assert list(shared_columns._mapped)[-1] == segs[-4].name
    finally:
        while shared_columns._mapped:
            shared_columns._mapped.popitem()[1].close()
        for seg in segs:
            pool.give(seg, reuse=False)
    assert not any(_exists(s.name) for s in segs)


def test_segments_are_reused_kept_within_bounds_and_unlinked_on_close():
    pool = SegmentPool(keep_bytes=3 * GRANULE)
    a = pool.take(10)
    assert a is not None and a.size == GRANULE
    pool.give(a)
    assert pool.take(GRANULE) is a  # the idle one, not a new one
    b = pool.take(2 * GRANULE + 1)
    assert b is not None and b.size == 3 * GRANULE
    pool.give(a)
    pool.give(b)  # 4 MiB idle > 3: the least recently returned goes
    assert pool.idle_bytes() == 3 * GRANULE
    assert not _exists(a.name) and _exists(b.name)
    big = pool.take(5 * GRANULE)  # b is too small: a new one
    pool.give(big)  # larger than keep_bytes, but the last returned: kept, b goes
    assert pool.idle_bytes() == 5 * GRANULE and not _exists(b.name)
    assert pool.take(4 * GRANULE) is big  # kept for the next batch that large
    pool.give(big, reuse=False)  # not reusable: unlinked at once
    assert pool.idle_bytes() == 0 and not _exists(big.name)
    kept = pool.take(1)
    pool.give(kept)
    pool.close()
    assert not _exists(kept.name) and pool.idle_bytes() == 0
    c = SegmentPool()
    late = c.take(1)
    c.close()
    c.give(late)  # returned after close (a batch that outlived it): unlinked at once
    assert not _exists(late.name)


def _clear_worker_maps():
    while shared_columns._mapped:
        shared_columns._mapped.popitem()[1].close()


def test_a_worker_drops_the_mappings_of_segments_the_server_unlinked():
    # A kept mapping would hold the segment's memory after the server dropped it, and read
    # the old bytes if a new segment got the same name.
    if not os.path.isdir(shared_columns.SHM_DIR):
        pytest.skip("unlinked segments are told apart on Linux")
    name = "zv-test-" + uuid.uuid4().hex[:12]
    old = SharedMemory(name, create=True, size=8)
    try:
        old.buf[:4] = b"OLD!"
        assert bytes(chunk_views(name, ((0, 4),))[0]) == b"OLD!"
        old.close()
        old.unlink()
        new = SharedMemory(name, create=True, size=GRANULE)
        try:
            new.buf[:4] = b"NEW!"
            new.buf[GRANULE - 4:] = b"tail"
            got = chunk_views(name, ((0, 4), (GRANULE - 4, GRANULE)))
            assert [bytes(v) for v in got] == [b"NEW!", b"tail"]
            del got
            other = SharedMemory(create=True, size=8)
            new.close()
            new.unlink()
            chunk_views(other.name, ((0, 1),))
            assert list(shared_columns._mapped) == [other.name]  # the unlinked one is unmapped
            other.close()
            other.unlink()
        finally:
            _clear_worker_maps()
    finally:
        for seg in (old,):
            if _exists(seg.name):
                seg.unlink()


def test_a_mapping_with_a_live_view_is_closed_once_the_view_is_gone():
    pool = SegmentPool()
    segs = [pool.take(1) for _ in range(shared_columns.WORKER_MAPS + 1)]
    try:
        held = chunk_views(segs[0].name, ((0, 2),))[0]
        evicted = shared_columns._mapped[segs[0].name]
        for seg in segs[1:]:  # one more than a worker keeps: the first is evicted, its view alive
            chunk_views(seg.name, ((0, 1),))
        assert segs[0].name not in shared_columns._mapped and shared_columns._unclosed == [evicted]
        held.release()
        chunk_views(segs[1].name, ((0, 1),))
        assert shared_columns._unclosed == [] and evicted.buf is None  # unmapped, its descriptor closed
    finally:
        _clear_worker_maps()
        for seg in segs:
            pool.give(seg, reuse=False)


def test_a_segment_removed_by_someone_else_leaves_no_tracker_warning():
    script = ("import os\n"
              "from app.engine.backends.shared_columns import SHM_DIR, SegmentPool\n"
              "pool = SegmentPool()\n"
              "seg = pool.take(1)\n"
              "os.unlink(os.path.join(SHM_DIR, seg.name.lstrip('/')))\n"
              "pool.give(seg, reuse=False)\n")
    if not os.path.isdir(shared_columns.SHM_DIR):
        pytest.skip("no /dev/shm here")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr and "resource_tracker" not in done.stderr


def test_no_room_for_a_segment_is_a_no_not_a_crash(monkeypatch):
    if not os.path.isdir(shared_columns.SHM_DIR):
        pytest.skip("no /dev/shm: segments are not reserved here")
    made = []
    real = shared_columns.SharedMemory

    def spy(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shared_columns, "SharedMemory", spy)
    monkeypatch.setattr(shared_columns.os, "posix_fallocate", full)
    assert SegmentPool().take(1 << 20) is None
    assert made and not _exists(made[0].name)  # the half-made segment is unlinked


def test_a_segment_that_would_leave_shm_less_than_half_free_is_refused():
    if not os.path.isdir(shared_columns.SHM_DIR):
        pytest.skip("no /dev/shm here")
    usage = shutil.disk_usage(shared_columns.SHM_DIR)
    pool = SegmentPool()
    assert pool.take(usage.free - usage.total // 2 + GRANULE) is None  # would leave under half free
    small = pool.take(1)
    assert small is not None
    pool.give(small)
    pool.close()


@pytest.mark.parametrize("scheme_id", ["ed25519", "ml-dsa-44"])
def test_shared_memory_pipe_and_threads_agree(scheme_id):
    items = _mixed(scheme_id, 24, seed=7)
    batch = _batch(scheme_id, items)
    runs = {}
    for label, kwargs in [("threads", {"parallelism": "thread"}),
                          ("pipe", {"parallelism": "process", "shared_memory": False}),
                          ("shared", {"parallelism": "process"})]:
        backend = CpuBackend(workers=2, chunk=5, **kwargs)
        try:
            _r = backend.run(batch)
            runs[label] = (_r.verdicts, _r.leaves)
            # Through a segment, which is kept for the next batch; never for the others.
            assert (backend._segments.idle_bytes() >= shared_size(batch)) == (label == "shared")
        finally:
            backend.close()
        assert backend._segments.idle_bytes() == 0
    verdicts, leaves = runs["threads"]
    assert verdicts.tolist() == _expected(24)
    for label in ("pipe", "shared"):
        assert np.array_equal(runs[label][0], verdicts) and np.array_equal(runs[label][1], leaves), label


def test_a_batch_without_a_segment_goes_through_the_pipe(monkeypatch):
    items = _mixed("ed25519", 12, seed=8)
    backend = CpuBackend(workers=2, chunk=4, parallelism="process")
    monkeypatch.setattr(backend._segments, "take", lambda size: None)
    try:
        assert backend.run(_batch("ed25519", items)).verdicts.tolist() == _expected(12)
    finally:
        backend.close()


def test_a_segment_removed_under_the_server_is_answered_through_the_pipe(monkeypatch):
    # As systemd's RemoveIPC or a tmp cleaner would: the workers cannot open the segment's name.
    class Removed(SharedBatch):
        def __init__(self, batch, seg):
            super().__init__(batch, seg)
            self.name = "zv-removed-" + uuid.uuid4().hex[:12]

    monkeypatch.setattr(shared_columns, "SharedBatch", Removed)
    items = _mixed("ml-dsa-44", 15, seed=9)
    batch = _batch("ml-dsa-44", items)
    backend = CpuBackend(workers=2, chunk=4, parallelism="process")
    try:
        _r = backend.run(batch)
        verdicts, leaves = _r.verdicts, _r.leaves
        assert verdicts.tolist() == _expected(15)
        assert backend._segments.idle_bytes() == 0  # that segment is not offered again
        reference = CpuBackend(workers=1)
        try:
            assert np.array_equal(leaves, reference.run(batch).leaves)
        finally:
            reference.close()
    finally:
        backend.close()
