"""Batches handed to the CPU backend's process workers through shared memory.

Without it a process chunk travels as bytes through a pipe: the server's process copies the
chunk out of the batch and pickles it, the pool's feeder thread writes it in pipe-sized
pieces, and the worker, which has just finished its last chunk, waits while it reads them
(each piece a hand-off between two processes) and unpickles them.

With it the server copies the whole batch once into a shared segment (:class:`SharedBatch`:
keys, signatures, messages, offsets, and room for each item's verdict and leaf hash) and
gives each worker one task for the batch: to claim ranges of items from a counter in the
segment's header (:class:`Claims`, under a lock the pool's workers share), verify them in
place and write their verdicts and leaves back, until none is left.  Claims shrink as the
batch runs out (:func:`_guided`), so the cores finish within a small claim of each other
however their speeds differ, and nothing but the task and the list of ranges a worker did
passes through the pool's pipes: no per-chunk hand-off through the pool's threads, which
left workers idle for a millisecond or more between chunks and at a batch's start.  The
server copies in pieces (``PIECE_BYTES``) and a worker may claim each piece as soon as it
lands, so the first claims do not wait for the last copy.  Measured side by side
(bench/results/process_chunks.md), the workers ran 97–99 % of the time on 4096-item batches
this way, 87–94 % with chunks through the pipe.
A worker maps each segment once and keeps it mapped (:func:`chunk_views`) until the server
unlinks it; segments are kept for the next batch (:class:`SegmentPool`): a new segment's
first write costs a page fault per 4 KiB page.

Shared memory is POSIX shared memory (:class:`multiprocessing.shared_memory.SharedMemory`,
a file in ``/dev/shm`` on Linux), whose resource tracker unlinks what a killed server
leaves once its workers have gone too (they leave when it does: ``cpu_worker.init_worker``).
``/dev/shm`` is a size-limited tmpfs (64 MiB in a Docker container by default, compose.yaml
sets more), shared with others (multiprocessing's semaphores live there), and a write to a
page it has no room for kills the writer with SIGBUS.  So a new segment is
made only where it leaves half of that file system free, and on Linux its pages are
reserved at once (``posix_fallocate``), which fails cleanly where another taker got there
first; then :meth:`SegmentPool.take` says no, and the caller uses the pipe.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from app.core.batch import Batch, message_span
from app.core.errors import SegmentGone

#: Bytes of idle segments kept for later batches, the most recently returned first (and always
#: the last one returned, however large); the others are unlinked.
KEEP_BYTES = 64 << 20
#: Segments are made in multiples of this, so batches of nearby sizes share them.
GRANULE = 1 << 20
#: Where Linux keeps POSIX shared memory.
SHM_DIR = "/dev/shm"
#: Segments a worker keeps mapped (the most recently used, and none the server has unlinked,
#: whose memory a mapping would keep): the server reuses a few, so a worker maps each once.
WORKER_MAPS = 4

Span = tuple[int, int]


def _leaves_half_free(size: int) -> bool:
    """Whether ``SHM_DIR`` keeps half its size free after ``size`` more bytes (or is not here)."""
    if not os.path.isdir(SHM_DIR):
        return True
    usage = shutil.disk_usage(SHM_DIR)
    return usage.free - size >= usage.total // 2


def _reserve(seg: SharedMemory) -> None:
    """Allocate every page of a new segment now (Linux): raises ``OSError`` (ENOSPC) where
    ``SHM_DIR`` lacks room, rather than SIGBUS at the first write past it."""
    path = os.path.join(SHM_DIR, seg.name.lstrip("/"))
    if not os.path.exists(path):
        return  # not a file system we can reserve on (macOS): its shm_open memory does not SIGBUS
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, seg.size)
    finally:
        os.close(fd)


def _drop(seg: SharedMemory) -> None:
    seg.close()
    try:
        seg.unlink()
    except FileNotFoundError:  # removed by someone else already: the tracker must forget it too
        resource_tracker.unregister(seg._name, "shared_memory")  # type: ignore[attr-defined]


class SegmentPool:
    """Shared-memory segments for batches, reused from batch to batch; thread-safe.

    Args:
        keep_bytes: total size of the idle segments kept (``KEEP_BYTES``).
    """

    def __init__(self, keep_bytes: int = KEEP_BYTES):
        self.keep_bytes = keep_bytes
        self._idle: list[SharedMemory] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self, size: int) -> SharedMemory | None:
        """A segment of at least ``size`` bytes for one batch, or ``None`` where a new one
        would leave the shared memory file system less than half free, or does not fit
        (module docstring): send that batch through the pipe."""
        with self._lock:
            fits = [s for s in self._idle if s.size >= size]
            if fits:
                seg = min(fits, key=lambda s: s.size)
                self._idle.remove(seg)
                return seg
        size = -(-max(1, size) // GRANULE) * GRANULE
        if not _leaves_half_free(size):
            return None
        try:
            seg = SharedMemory(create=True, size=size)
        except OSError:
            return None
        try:
            _reserve(seg)
        except OSError:
            _drop(seg)
            return None
        return seg

    def give(self, seg: SharedMemory, reuse: bool = True) -> None:
        """Return ``seg`` once no worker reads it.  It is kept, and the least recently
        returned idle segments are unlinked while those kept total more than ``keep_bytes``
        (``seg`` stays even if it alone is larger: a server that verifies batches that large
        keeps one for them rather than making one per batch).  Unlinked at once where not
        ``reuse`` (its name no longer opens it: removed by someone else)."""
        with self._lock:
            if reuse and not self._closed:
                self._idle.append(seg)
                while len(self._idle) > 1 and sum(s.size for s in self._idle) > self.keep_bytes:
                    _drop(self._idle.pop(0))
                return
        _drop(seg)

    def idle_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._idle)

    def close(self) -> None:
        """Unlink every idle segment; a segment given back later is unlinked at once."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for seg in idle:
            _drop(seg)


#: A batch's segment opens with a header of int64 words, at these byte offsets: the items
#: claimed so far, the items copied in so far, and 1 once the server has stopped the batch
#: (it failed while copying).
CLAIMED, READY, STOPPED = 0, 8, 16
_HEADER = struct.Struct("<qqq")
_WORD = struct.Struct("<q")
HEADER_BYTES = 64
#: The server copies a batch in pieces of about this many bytes and lets the workers claim
#: each as it lands: the first claims start after the first megabyte, not the last.
PIECE_BYTES = 1 << 20
#: Seconds a worker that has caught up with the copying waits before it looks again.
WAIT_SECONDS = 0.0002
#: Seconds the server waits for the claim lock (held for microseconds at a time) before it
#: stops copying the batch in and fails it.
LOCK_SECONDS = 10.0

#: What a worker needs to find a batch's regions in its segment: items, key bytes per item,
#: signature bytes per item, message bytes in all.
Layout = tuple[int, int, int, int]


def layout_of(batch: Batch) -> Layout:
    """``batch``'s :data:`Layout`."""
    return len(batch), batch.pks.shape[1], batch.sigs.shape[1], int(batch.offsets[-1])


def regions(layout: Layout) -> tuple[int, ...]:
    """Where a batch of ``layout`` lies in its segment: the start of its keys, signatures,
    messages, offsets (``uint64[n + 1]``), verdicts (``uint8[n]``) and leaves
    (``uint8[n, 32]``), then the end; each starts on a 64-byte line, after the header."""
    n, pk_len, sig_len, msg_bytes = layout
    out = [HEADER_BYTES]
    for size in (n * pk_len, n * sig_len, msg_bytes, 8 * (n + 1), n, 32 * n):
        out.append(out[-1] + -(-size // 64) * 64)
    return tuple(out)


def shared_size(batch: Batch) -> int:
    """Bytes a :class:`SharedBatch` of ``batch`` needs: header, columns, verdicts and leaves."""
    return regions(layout_of(batch))[-1]


def _guided(remaining: int, min_items: int, workers: int) -> int:
    """Items of the next claim: an even share of half the remaining work per worker, never
    below ``min_items``.  Early claims are large (few hand-offs) and the last ones small, so
    the cores finish within about one small claim of each other however their speeds differ
    (guided self-scheduling)."""
    return max(min_items, -(-remaining // (2 * workers)))


def _acquire(lock, abandoned: Callable[[], bool]) -> None:
    """Take ``lock``, looking every ``WAIT_SECONDS × 100`` whether to give up instead."""
    deadline = time.monotonic() + LOCK_SECONDS
    while not lock.acquire(timeout=WAIT_SECONDS * 100):
        if abandoned() or time.monotonic() > deadline:
            raise TimeoutError(f"the claim lock was not free (held for up to {LOCK_SECONDS} s)")


class SharedBatch:
    """``batch`` in ``seg`` for the process workers, which claim items from it a range at a
    time (:class:`Claims`) and write back each item's verdict and leaf hash.

    The header and offsets are written here; the columns by :meth:`fill`, in pieces the
    workers may claim as each lands.  The server must wait for every worker's task before it
    reads :meth:`results` or reuses ``seg``.

    Raises:
        ValueError: ``seg`` is smaller than :func:`shared_size` of ``batch``.
    """

    def __init__(self, batch: Batch, seg: SharedMemory):
        self.layout = layout_of(batch)
        self._at = regions(self.layout)
        if seg.size < self._at[-1]:
            raise ValueError(f"segment of {seg.size} bytes for a batch of {self._at[-1]}")
        self.batch, self.seg, self.name = batch, seg, seg.name
        buf = self._buf()
        _HEADER.pack_into(buf, 0, 0, 0, 0)
        n = self.layout[0]
        np.copyto(np.frombuffer(buf, np.uint64, n + 1, self._at[3]), batch.offsets, casting="unsafe")

    def _buf(self) -> memoryview:
        buf = self.seg.buf
        assert buf is not None  # open until the pool closes it, after the batch
        return buf

    def fill(self, lock, abandoned: Callable[[], bool] = lambda: False) -> None:
        """Copy the keys, signatures and messages in, ``PIECE_BYTES`` at a time, and after
        each piece let the workers claim its items (``lock``: the pool's claim lock).  The
        copies release the GIL, so the pool's threads hand the tasks over meanwhile.

        Raises:
            TimeoutError: the lock was held for over ``LOCK_SECONDS``, or was not free while
                ``abandoned()`` became true (a worker died, perhaps holding it).
        """
        b, (n, pk_len, sig_len, msg_bytes) = self.batch, self.layout
        step = max(1, PIECE_BYTES // (pk_len + sig_len + msg_bytes // max(1, n) + 1))
        buf = self._buf()
        dst = np.frombuffer(buf, np.uint8)
        try:
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                m_lo, m_hi = int(b.offsets[lo]), int(b.offsets[hi])
                for start, width, col in ((self._at[0], pk_len, b.pks), (self._at[1], sig_len, b.sigs)):
                    np.copyto(dst[start + lo * width:start + hi * width], col[lo:hi].reshape(-1))
                np.copyto(dst[self._at[2] + m_lo:self._at[2] + m_hi], b.msgs[m_lo:m_hi])
                # The lock orders the copy before the count for the workers (a memory barrier);
                # a worker killed while it held the lock breaks the pool, which must not hang here.
                _acquire(lock, abandoned)
                try:
                    _WORD.pack_into(buf, READY, hi)
                finally:
                    lock.release()
        finally:
            del dst  # no view may outlive the batch: the pool closes the segment later

    def stop(self) -> None:
        """Tell the workers to claim nothing more (the server gave up on the batch).  Without
        the lock, which may be what failed: a worker that reads the flag late claims one more
        range at most."""
        _WORD.pack_into(self._buf(), STOPPED, 1)

    def results(self) -> tuple[bytes, bytes]:
        """The verdicts (``n`` bytes, 0/1) and leaf hashes (``32 n`` bytes) the workers wrote;
        what an item no worker claimed reads as is undefined (a reused segment keeps its old
        bytes): the caller verifies those ranges elsewhere."""
        n, buf = self.layout[0], self._buf()
        return bytes(buf[self._at[4]:self._at[4] + n]), bytes(buf[self._at[5]:self._at[5] + 32 * n])


class Claims:
    """In a worker: the batch in segment ``name`` laid out as ``layout`` (:class:`SharedBatch`).

    Raises:
        SegmentGone: no segment ``name`` (:func:`chunk_views`).
    """

    def __init__(self, name: str, layout: Layout):
        self.layout = layout
        at = regions(layout)
        views = chunk_views(name, ((0, HEADER_BYTES),) + tuple(zip(at, at[1:])))
        self._header, self._pks, self._sigs, self._msgs, offsets, self._verdicts, self._leaves = views
        self.offsets = np.frombuffer(offsets, np.uint64, layout[0] + 1)

    def claim(self, lock, min_items: int, workers: int) -> Span | None:
        """The next items ``[lo, hi)`` to verify (:func:`_guided` of the remaining work, and
        only items copied in already: it waits for the next piece where it has caught up), or
        None when every item is claimed or the server has stopped the batch."""
        n = self.layout[0]
        while True:
            with lock:
                claimed, ready, stopped = _HEADER.unpack_from(self._header)
                if stopped or claimed >= n:
                    return None
                if claimed < ready:
                    hi = min(ready, claimed + _guided(n - claimed, min_items, workers))
                    _WORD.pack_into(self._header, CLAIMED, hi)
                    return claimed, hi
            time.sleep(WAIT_SECONDS)

    def chunk(self, lo: int, hi: int) -> tuple[memoryview, memoryview, memoryview, list[int]]:
        """Items [lo, hi) as views of their keys, signatures and messages, and their message
        offsets relative to those messages."""
        _, pk_len, sig_len, _ = self.layout
        base, end, off = message_span(self.offsets, lo, hi)
        return (self._pks[lo * pk_len:hi * pk_len], self._sigs[lo * sig_len:hi * sig_len], self._msgs[base:end],
                off.tolist())

    def put(self, lo: int, hi: int, verdicts: bytes, leaves: bytes) -> None:
        """Write items [lo, hi)'s verdicts (``hi - lo`` bytes) and leaf hashes back."""
        self._verdicts[lo:hi] = verdicts
        self._leaves[32 * lo:32 * hi] = leaves


#: In a worker: the segments it has mapped, least recently used first.
_mapped: OrderedDict[str, SharedMemory] = OrderedDict()
#: In a worker: mappings dropped while a view of them was still alive, closed on a later call.
_unclosed: list[SharedMemory] = []


def _close(seg: SharedMemory) -> bool:
    """Unmap ``seg`` (and close its descriptor) now, or keep it for a later try where a view
    of it is still alive; whether it is closed."""
    try:
        seg.close()
    except BufferError:
        if seg not in _unclosed:
            _unclosed.append(seg)
        return False
    return True


def _unlinked(seg: SharedMemory) -> bool:
    """Whether the server has unlinked ``seg`` (Linux: no name links to its file any more)."""
    return sys.platform == "linux" and os.fstat(seg._fd).st_nlink == 0  # type: ignore[attr-defined]


def chunk_views(name: str, spans: tuple[Span, ...]) -> list[memoryview]:
    """In a worker: views of ``spans`` of the segment ``name``, without a copy.

    The segment is mapped on first use and kept for later batches (the ``WORKER_MAPS`` most
    recently used).  Mappings of segments the server has unlinked are dropped first: they
    would keep the memory allocated, and a new segment may get the name again.  The views are
    valid while the server holds the batch, which it does until every worker's task for it
    has returned.

    Raises:
        SegmentGone: no segment ``name`` (unlinked by someone else: the server sends what no
            worker did through the pipe instead).
    """
    _unclosed[:] = [s for s in _unclosed if not _close(s)]
    for old in [n for n, s in _mapped.items() if _unlinked(s)]:
        _close(_mapped.pop(old))
    seg = _mapped.pop(name, None)
    if seg is None:
        try:
            seg = SharedMemory(name)
        except FileNotFoundError:
            raise SegmentGone(f"no shared-memory segment {name}") from None
    _mapped[name] = seg
    while len(_mapped) > WORKER_MAPS:
        _close(_mapped.popitem(last=False)[1])
    buf = seg.buf
    assert buf is not None
    return [buf[a:z] for a, z in spans]
