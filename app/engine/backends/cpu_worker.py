"""What runs in a CPU pool worker, process or thread, of :mod:`app.engine.backends.cpu`.

One job: verify one chunk of a batch and hash its Merkle leaves, the chunk given as flat
bytes (:func:`verify_range` of :func:`chunk_args`, through a process pool's pipe or to a
thread), as ranges claimed of a batch in shared memory (:func:`shared_batch`,
:mod:`app.engine.backends.shared_columns`), or as the batch's own columns in the native loop
(:func:`native_range`, on a thread); and, in a spawned worker process, start up
(:func:`init_worker`: the pool's claim lock, SIGINT ignored, the libraries and native loops
loaded) and leave when the server that started it is gone.

Everything a process pool runs is a module-level function of this module: the pool pickles
it by its module path, and a spawned worker imports this module (not the backend) to find it.
The module's state is per process: the claim lock :func:`init_worker` was given and the
BLS12-381 batch verifier whose invalid-fraction estimate sizes every chunk's groups.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import numpy as np

from app.core.batch import AggregateItem, Batch, message_span
from app.core.schemes import SCHEMES, option_flags
from app.engine.backends import native, shared_columns
from app.engine.commit import merkle
from app.engine.reference import bls_aggregate, reference
from app.engine.reference.bls_batch import BlsBatchVerifier

#: A column as it reaches a worker: bytes through the pipe, a view of a shared segment.
Bytes = bytes | memoryview

#: The arguments of :func:`verify_range`, as :func:`chunk_args` builds them.
ChunkArgs = tuple[str, int, bytes, bytes, bytes, list[int], bytes, int, bool, bool]

#: How often a process worker looks whether the server that started it is still there, in seconds.
PARENT_POLL_SECONDS = 1.0

#: One per process: its running invalid-fraction estimate sizes the groups of every chunk.
_BLS_BATCH = BlsBatchVerifier()

#: In a process worker: the pool's claim lock (:func:`init_worker`); None elsewhere.
_claim_lock = None


def verify_range(scheme_id: str, pk_len: int, pks: Bytes, sigs: Bytes, msgs: Bytes,
                 offsets: list[int], ctx: bytes, options: int, use_native: bool = False,
                 bls_batch: bool = False) -> tuple[bytes, bytes]:
    """Verify a chunk of ``n = len(offsets) - 1`` items given as flat bytes (in the native
    loop where ``use_native``, the scheme's family has one and it builds).

    Args:
        scheme_id: a key of :data:`app.core.schemes.SCHEMES`.
        pk_len: bytes per public key (a scheme may take more than one key length).
        pks: ``n · pk_len`` bytes, the keys one after another; sigs: ``n · sig_len`` bytes
            (the scheme's signature length); msgs: the messages one after another.
        offsets: ``n + 1`` message offsets in bytes, relative to ``msgs``.
        ctx, options: the batch's context and option bits (:attr:`app.core.batch.Batch.options`,
            as on the wire).
        use_native: run the families the native loops serve here
            (:attr:`app.engine.backends.native.NativeLoops.families`) in them.
        bls_batch: verify BLS12-381 chunks with :class:`BlsBatchVerifier` (same verdicts as
            the one-by-one loop, see app/engine/reference/bls_batch.py).

    Returns:
        (``n`` verdict bytes, 0 or 1; ``32 · n`` bytes, the Merkle leaf hash of each item):
        the leaves are hashed here so that they too are spread over the cores.

    Never raises for a bad item (a library's exception is a false verdict).  Raises
    ``KeyError`` for an unknown ``scheme_id`` and ``ValueError`` where the columns' lengths
    do not match ``n``, ``pk_len`` and the scheme's signature length.  The columns may be
    views of a shared-memory segment (:func:`shared_batch`).
    """
    scheme = SCHEMES[scheme_id]
    sig_len, code = scheme.sig_len, scheme.code
    opts = SimpleNamespace(**option_flags(options))
    n = len(offsets) - 1
    u8 = np.uint8
    columns = (np.frombuffer(pks, u8).reshape(n, pk_len), np.frombuffer(sigs, u8).reshape(n, sig_len),
               np.frombuffer(msgs, u8), np.asarray(offsets, np.uint64))
    loops = native.loops() if use_native and scheme.family in native.FAMILIES else None
    if loops is not None and scheme.family in loops.families:
        return loops.run(scheme.family, code, *columns, opts.prehashed, opts.allow_high_s, ctx, bls_batch)
    fn = reference.verifier(scheme)
    kwargs = scheme.verifier_options(opts)  # the options its scheme accepts, by name
    mv_pk, mv_sig, mv_msg = memoryview(pks), memoryview(sigs), memoryview(msgs)
    rows = [(mv_pk[i * pk_len:(i + 1) * pk_len], mv_msg[offsets[i]:offsets[i + 1]],
             mv_sig[i * sig_len:(i + 1) * sig_len]) for i in range(n)]
    verdicts: list[bool] = []
    if bls_batch and scheme.family == "bls12-381" and rows:
        try:
            verdicts = _BLS_BATCH.verify(*zip(*rows))
        except Exception:  # a library surprise: the one-by-one loop below decides
            verdicts = []
    if not verdicts:
        for pk, msg, sig in rows:
            try:
                ok = fn(pk, msg, sig, ctx, **kwargs)
            except Exception:  # a library surprise on one item must not fail the batch
                ok = False
            verdicts.append(ok)
    flags = bytes(1 if ok else 0 for ok in verdicts)
    hasher = native.leaf_hasher()  # loaded at warm-up, in the server and in each pool worker
    if hasher is not None:  # hashlib's SHA-256 without four Python calls per item: half the time
        return flags, hasher.leaves(code, flags, *columns)
    return flags, b"".join(merkle.leaf_hash(code, ok, pk, msg, sig) for ok, (pk, msg, sig) in zip(verdicts, rows))


def chunk_args(batch: Batch, lo: int, hi: int, use_native: bool, bls_batch: bool) -> ChunkArgs:
    """:func:`verify_range`'s arguments for items ``[lo, hi)`` of ``batch``: the chunk's
    columns copied out as bytes (``(hi - lo) · pk_len``, ``(hi - lo) · sig_len`` and its
    messages' bytes), its ``hi - lo + 1`` message offsets relative to its first message, the
    batch's options, then ``use_native`` and ``bls_batch``.  Needs ``0 <= lo < hi <= len(batch)``."""
    base, end, off = message_span(batch.offsets, lo, hi)
    return (batch.scheme.id, batch.pks.shape[1], batch.pks[lo:hi].tobytes(), batch.sigs[lo:hi].tobytes(),
            batch.msgs[base:end].tobytes(), off.tolist(), batch.ctx, batch.options, use_native, bls_batch)


def timed(fn, *args):
    """``(fn(*args), CPU seconds the calling thread spent in it)``: what a chunk cost its core,
    however long it queued or shared the core with other threads (:func:`time.thread_time`).
    The backend's per-item cost is learned from this, not from a batch's wall time, which
    grows with every other batch in the pools: learned from wall time, the cost rose with
    concurrency, chunks shrank towards one item, their dispatch took the GIL, and throughput
    fell (Ed25519 ×4096 at 16 concurrent requests: 0.5× of one; issue 48)."""
    t0 = time.thread_time()
    out = fn(*args)
    return out, time.thread_time() - t0


def shared_batch(name: str, layout: shared_columns.Layout, scheme_id: str, ctx: bytes, options: int,
                 use_native: bool, bls_batch: bool, min_items: int,
                 workers: int) -> tuple[list[shared_columns.Span], float]:
    """In a process worker: claim ranges of the batch in segment ``name`` until none is left
    (app/engine/backends/shared_columns.py), verify each with :func:`verify_range` and write
    its verdicts and leaves back.

    Args:
        name: the segment's name; layout: its batch's :data:`shared_columns.Layout`.
        scheme_id, ctx, options, use_native, bls_batch: as :func:`verify_range`.
        min_items: the smallest claim, in items; workers: the pool's worker count (claims
            shrink towards ``min_items`` as the batch runs out, :meth:`shared_columns.Claims.claim`).

    Returns:
        (the ranges ``[lo, hi)`` of items this worker did, in the order it claimed them; the
        CPU seconds it spent verifying them, as :func:`timed`).

    Raises:
        SegmentGone: the segment is gone (the caller sends the ranges no worker did through
            the pipe).
    """
    batch = shared_columns.Claims(name, layout)
    done: list[shared_columns.Span] = []
    t0 = time.thread_time()
    while (span := batch.claim(_claim_lock, min_items, workers)) is not None:
        batch.put(*span, *verify_range(scheme_id, layout[1], *batch.chunk(*span), ctx, options, use_native,
                                       bls_batch))
        done.append(span)
    return done, time.thread_time() - t0


def native_range(batch: Batch, lo: int, hi: int, bls_batch: bool = True) -> tuple[bytes, bytes]:
    """Verify items ``[lo, hi)`` of ``batch`` in the native loop, on the batch's own columns
    (no copy: for a thread worker or the server's own thread); ``bls_batch``: BLS12-381 by
    random linear combination (:meth:`app.engine.backends.native_bls.BlsLoops.verify`).

    Returns (``hi - lo`` verdict bytes, 0 or 1; ``32 · (hi - lo)`` bytes of leaf hashes).
    The caller checks first that the native loops are loaded and serve the batch's family
    (:meth:`app.engine.backends.cpu.CpuBackend.native_family`); else ``AssertionError`` or
    ``ValueError`` (:meth:`app.engine.backends.native.NativeLoops.run`).
    """
    loops = native.loops()
    assert loops is not None  # callers check native_family first
    base, end, off = message_span(batch.offsets, lo, hi)
    return loops.run(batch.scheme.family, batch.scheme.code, batch.pks[lo:hi], batch.sigs[lo:hi],
                     batch.msgs[base:end], off.astype(np.uint64), batch.prehashed, batch.allow_high_s, batch.ctx,
                     bls_batch)


def aggregate_with_leaf(item: AggregateItem) -> tuple[bool, bytes]:
    """The verdict of a BLS aggregate item on blst (the native loops must be loaded with
    their blst loops: :attr:`app.engine.backends.native.NativeLoops.bls`; a pool process that
    could not load them verifies on the arkworks reference) and its leaf hash; a library
    surprise is a false verdict."""
    loops = native.loops()
    if loops is None or loops.bls is None:
        return bls_aggregate.verify_with_leaf(item)
    try:
        ok = loops.bls.aggregate_item(item)
    except Exception:  # a library surprise on one item must not fail the request
        ok = False
    return ok, merkle.aggregate_leaf(item, ok)


def _leave_with_parent(parent: int) -> None:
    """Exit this process (``os._exit(0)``, no clean-up) once ``parent`` (a pid) is no longer
    its parent, looking every ``PARENT_POLL_SECONDS``; never returns."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(0)


def init_worker(server: int, claim_lock=None) -> None:
    """A process pool's initializer, run once in each spawned worker before its first task.

    Args:
        server: the pid of the server that made the pool; the worker leaves once that process
            is no longer its parent (a watch thread, :data:`PARENT_POLL_SECONDS`).
        claim_lock: the pool's ``multiprocessing`` lock over the claim counters of shared
            batches (:func:`shared_batch`); None where the pool hands out no shared batches.

    Ignores SIGINT from here on, and loads the native loops (None where they do not build:
    the Python loop) and every scheme's reference verifier.  An exception here (a reference
    library that does not import) breaks the pool: its tasks fail with ``BrokenProcessPool``.
    """
    global _claim_lock
    _claim_lock = claim_lock  # guards the claim counters of shared batches (shared_columns.Claims)
    # Ctrl-C reaches the whole process group: the server shuts this pool down in order, so
    # a worker must not die of the signal mid-chunk (and print a KeyboardInterrupt traceback).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A server killed outright (SIGKILL, the OOM killer) cannot shut its pool down, and the
    # workers, which hold the pool's pipes themselves, would wait on them for ever, holding its
    # shared memory (shared_columns.py): they leave once the server (``server``, its pid: it
    # may be gone before this runs) is no longer their parent.
    threading.Thread(target=_leave_with_parent, args=(server,), name="zv-parent-watch", daemon=True).start()
    # Every worker (an initializer runs in each; a warm-up task may not reach them all) imports
    # every library and loads the native loops (the parent's warm-up built them: a cached
    # build) before its first real chunk.
    native.loops()
    for s in SCHEMES.values():
        reference.verifier(s)


def warm(_: int) -> int:
    """A task for every worker at start-up, so that the pool spawns its workers (each running
    :func:`init_worker`) before the first batch rather than during it.  Returns the worker's pid."""
    return os.getpid()
