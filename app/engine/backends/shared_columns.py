"""Batches handed to the CPU backend's process workers through shared memory.

Without it a process chunk travels as bytes through a pipe: the server's process copies the
chunk out of the batch and pickles it, the pool's feeder thread writes it in pipe-sized
pieces, and the worker, which has just finished its last chunk, waits while it reads them
(each piece a hand-off between two processes) and unpickles them.  Measured side by side
(bench/results/process_chunks.md, 4096-item ML-DSA batches), the workers ran 93–94 % of the
time through the pipe and 95–98 % through shared memory.

With it the server copies each chunk once into a shared segment, just before it sends the
chunk's byte spans (a few numbers), and the worker verifies straight from the segment,
which it maps once and keeps mapped (:func:`chunk_views`) until the server unlinks it.
Segments are kept for the next batch (:class:`SegmentPool`): a new segment's first write
costs a page fault per 4 KiB page.

Shared memory is POSIX shared memory (:class:`multiprocessing.shared_memory.SharedMemory`,
a file in ``/dev/shm`` on Linux), whose resource tracker unlinks what a killed server
leaves once its workers have gone too (they leave when it does: ``cpu._worker_init``).
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
import sys
import threading
from collections import OrderedDict
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from app.engine.verify.batch import Batch
from app.errors import SegmentGone

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


def shared_size(batch: Batch) -> int:
    """Bytes a :class:`SharedBatch` of ``batch`` needs: keys, signatures and messages."""
    return batch.pks.nbytes + batch.sigs.nbytes + int(batch.offsets[-1])


class SharedBatch:
    """``batch``'s columns in ``seg`` (laid out ``pks ‖ sigs ‖ msgs``), written chunk by chunk
    as :meth:`spans` is called, so the first chunk can start before the last is copied.

    Raises:
        ValueError: ``seg`` is smaller than :func:`shared_size` of ``batch``.
    """

    def __init__(self, batch: Batch, seg: SharedMemory):
        if seg.size < shared_size(batch):
            raise ValueError(f"segment of {seg.size} bytes for a batch of {shared_size(batch)}")
        self.batch, self.seg, self.name = batch, seg, seg.name
        self._pk_len, self._sig_len = batch.pks.shape[1], batch.sigs.shape[1]
        self._sig_start = batch.pks.nbytes
        self._msg_start = self._sig_start + batch.sigs.nbytes

    def spans(self, lo: int, hi: int) -> tuple[Span, Span, Span]:
        """Copy items [lo, hi) into the segment; returns the byte spans ``[a, z)`` of their
        keys, signatures and messages there (messages at their offsets in the batch)."""
        b = self.batch
        m_lo, m_hi = int(b.offsets[lo]), int(b.offsets[hi])
        out = ((lo * self._pk_len, hi * self._pk_len),
               (self._sig_start + lo * self._sig_len, self._sig_start + hi * self._sig_len),
               (self._msg_start + m_lo, self._msg_start + m_hi))
        buf = self.seg.buf
        assert buf is not None  # open until the pool closes it, after the batch
        for (a, z), col in zip(out, (b.pks[lo:hi], b.sigs[lo:hi], b.msgs[m_lo:m_hi])):
            buf[a:z] = np.ascontiguousarray(col).reshape(-1).data
        return out


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

    The segment is mapped on first use and kept for later chunks (the ``WORKER_MAPS`` most
    recently used).  Mappings of segments the server has unlinked are dropped first: they
    would keep the memory allocated, and a new segment may get the name again.  The views are
    valid while the server holds the batch, which it does until every chunk of it has returned.

    Raises:
        SegmentGone: no segment ``name`` (unlinked by someone else: the caller sends the
            chunk through the pipe instead).
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
