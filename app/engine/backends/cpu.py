"""The CPU backend: the reference libraries, spread over every core.

A batch is cut into chunks.  Ed25519 and secp256k1 chunks run in the native loops of
:mod:`app.engine.backends.native` (the libraries' own C entry points over whole columns,
leaf hashes in the same pass, GIL released), so they run on a thread pool and the columns
are passed without a copy.  Other libraries run the Python loop over
:mod:`app.engine.verify.reference`: on threads where the library releases the GIL (measured
at warm-up by :func:`releases_gil`; :data:`app.engine.verify.reference.RELEASES_GIL` before),
else on a pool of worker processes (started with ``spawn``, so a threaded server is never
forked).  The server copies a process batch into a shared-memory segment and each worker
claims ranges of it until none is left (:mod:`app.engine.backends.shared_columns`,
:func:`_shared_batch`); where there is no room for a segment, chunks go through the pool's
pipe as a few byte strings.

Chunk size per scheme is measured, not fixed: every batch the backend runs (the start-up
self-test first) updates the scheme's per-item cost, and a chunk is sized to about
``CHUNK_SECONDS`` of work (by pool kind), large enough that the per-chunk dispatch is noise;
a large batch's last round of chunks is cut smaller (:func:`chunk_bounds`), so that a core
slowed by a neighbour, or the last full chunk, does not keep the others waiting.  Claims
from a shared batch shrink the same way down to ``CLAIM_SECONDS`` of work.

Where the library releases the GIL, which pool is faster is measured too: a library can
release it during its heavy calls and still hold it for much of a chunk (BLS batch
verification makes many short arkworks calls with Python between them, and ran at half the
rate on threads that it reached on processes: bench/results/cpu_engine.md).  So such a
scheme's first parallel batches run on threads and processes in turn, ``KIND_TRIALS`` each,
and from then on on the kind with the lower measured wall time per item (the median of its
trials, then a running average), trying the other kind again every ``REVISIT_BATCHES``
batches in case the load has changed.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import CancelledError, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Literal

import numpy as np

from app.core.batch import AggregateItem, Batch, message_span
from app.core.errors import BackendUnavailable, SegmentGone
from app.core.schemes import SCHEMES, Scheme
from app.engine.backends import native, shared_columns
from app.engine.commit import merkle
from app.engine.verify import bls_aggregate, reference
from app.engine.verify.bls_batch import BlsBatchVerifier

log = logging.getLogger("zapverify.engine")

Parallelism = Literal["auto", "thread", "process"]
Bytes = bytes | memoryview

#: Seconds of single-core work per chunk, once the scheme's per-item cost is measured: a
#: thread chunk costs tens of µs to dispatch; a process chunk about half a millisecond of the
#: server's CPU (pickles, hand-offs between the executor's threads), taken from the cores the
#: workers run on, so 100 ms (bench/results/process_chunks.md).  See :func:`chunk_bounds` for
#: how a batch is cut.
CHUNK_SECONDS = {False: 0.004, True: 0.1}
#: Seconds of single-core work in the smallest range a process worker claims of a batch in
#: shared memory (shared_columns.Claims): the last claims, which decide how long the first
#: core to finish waits for the last; each costs the worker some 50 µs of Python.
CLAIM_SECONDS = 0.002
#: Chunks per worker that a batch's last round of full chunks is cut into (:func:`chunk_bounds`).
TAIL_PIECES = 2
#: Items per chunk before a scheme has been measured.
DEFAULT_CHUNK = 64
#: Parallel batches of a scheme on each pool kind, in turn, before it keeps the faster: the
#: median of three, so that one batch slowed by a neighbour does not decide.
KIND_TRIALS = 3
#: Parallel batches of a scheme on the faster pool kind before one tries the other again.
REVISIT_BATCHES = 32
#: Weight of the newest batch in a pool kind's running wall time per item.
_KIND_EWMA = 0.5

def _ewma(old: float | None, new: float, weight: float) -> float:
    """A running average: ``new`` alone at first, then ``weight`` of each newest value."""
    return new if old is None else (1 - weight) * old + weight * new


#: One per process: its running invalid-fraction estimate sizes the groups of every chunk.
_BLS_BATCH = BlsBatchVerifier()


def _verify_range(scheme_id: str, pk_len: int, pks: Bytes, sigs: Bytes, msgs: Bytes,
                  offsets: list[int], ctx: bytes, prehashed: bool, allow_high_s: bool,
                  use_native: bool = False, bls_batch: bool = False) -> tuple[bytes, bytes]:
    """Verify a chunk given as flat bytes (in the native loop where ``use_native`` and it builds).

    BLS12-381 chunks go through :class:`BlsBatchVerifier` when ``bls_batch`` is set (same
    verdicts as the one-by-one loop, see app/engine/verify/bls_batch.py).

    Returns (one verdict byte per item, the 32-byte Merkle leaf hash of each item): the
    leaves are hashed here so that they too are spread over the cores.  Runs in a worker
    process or thread; ``offsets`` are relative to ``msgs``; the columns may be views of a
    shared-memory segment (:func:`_shared_batch`).
    """
    scheme = SCHEMES[scheme_id]
    sig_len, code = scheme.sig_len, scheme.code
    n = len(offsets) - 1
    u8 = np.uint8
    columns = (np.frombuffer(pks, u8).reshape(n, pk_len), np.frombuffer(sigs, u8).reshape(n, sig_len),
               np.frombuffer(msgs, u8), np.asarray(offsets, np.uint64))
    loops = native.loops() if use_native and scheme.family in native.FAMILIES else None
    if loops is not None:
        return loops.run(scheme.family, code, *columns, prehashed, allow_high_s)
    fn = reference.verifier(scheme)
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
                ok = fn(pk, msg, sig, ctx, prehashed, allow_high_s)
            except Exception:  # a library surprise on one item must not fail the batch
                ok = False
            verdicts.append(ok)
    flags = bytes(1 if ok else 0 for ok in verdicts)
    hasher = native.leaf_hasher()  # loaded at warm-up, in the server and in each pool worker
    if hasher is not None:  # hashlib's SHA-256 without four Python calls per item: half the time
        return flags, hasher.leaves(code, flags, *columns)
    return flags, b"".join(merkle.leaf_hash(code, ok, pk, msg, sig) for ok, (pk, msg, sig) in zip(verdicts, rows))


def _chunk_args(batch: Batch, lo: int, hi: int, use_native: bool, bls_batch: bool) -> tuple:
    """:func:`_verify_range`'s arguments for items [lo, hi): the chunk's columns as bytes."""
    base, end, off = message_span(batch.offsets, lo, hi)
    return (batch.scheme.id, batch.pks.shape[1], batch.pks[lo:hi].tobytes(), batch.sigs[lo:hi].tobytes(),
            batch.msgs[base:end].tobytes(), off.tolist(), batch.ctx, batch.prehashed, batch.allow_high_s,
            use_native, bls_batch)


#: In a process worker: the pool's claim lock (:func:`_worker_init`).
_claim_lock = None


def _shared_batch(name: str, layout: shared_columns.Layout, scheme_id: str, ctx: bytes, prehashed: bool,
                  allow_high_s: bool, use_native: bool, bls_batch: bool, min_items: int,
                  workers: int) -> list[shared_columns.Span]:
    """In a process worker: claim ranges of the batch in segment ``name`` until none is left
    (app/engine/backends/shared_columns.py), verify each with :func:`_verify_range` and write
    its verdicts and leaves back.  Returns the ranges this worker did.

    Raises:
        SegmentGone: the segment is gone (the caller sends the ranges no worker did through
            the pipe).
    """
    batch = shared_columns.Claims(name, layout)
    done: list[shared_columns.Span] = []
    while (span := batch.claim(_claim_lock, min_items, workers)) is not None:
        batch.put(*span, *_verify_range(scheme_id, layout[1], *batch.chunk(*span), ctx, prehashed, allow_high_s,
                                        use_native, bls_batch))
        done.append(span)
    return done


def _broke(f: Future) -> bool:
    """Whether ``f`` failed because its process pool broke (a worker died)."""
    return f.done() and not f.cancelled() and isinstance(f.exception(), BrokenProcessPool)


def _missing(done: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """The ranges of ``0 … n`` that no range in ``done`` covers, in order."""
    out, at = [], 0
    for lo, hi in sorted(done):
        if lo > at:
            out.append((at, lo))
        at = max(at, hi)
    return out + [(at, n)] if at < n else out


def chunk_bounds(n: int, full: int, workers: int) -> list[tuple[int, int]]:
    """Item ranges ``[lo, hi)`` that cover ``0 … n`` in order, for ``workers`` cores and a
    measured full chunk of ``full`` items; none larger than ``full`` or an equal share.

    A batch that fits in one round (``n ≤ workers × full``) is cut into equal shares, one per
    worker (sizes differing by one item at most).  A larger one runs full chunks until one
    round's worth is left, and that is cut into ``TAIL_PIECES`` equal chunks per worker: the
    pools take chunks in order and a batch waits for its slowest core, so with full chunks to
    the end one core could sit out most of another's last chunk, while more, smaller chunks
    throughout would cost dispatch (about half a millisecond of the server's CPU per process
    chunk).  One worker gets equal chunks.
    """
    size = max(1, min(full, -(-n // workers)))
    if workers == 1:
        return [(lo, min(n, lo + size)) for lo in range(0, n, size)]
    out: list[tuple[int, int]] = []
    lo = 0
    while n - lo > workers * size:
        out.append((lo, lo + size))
        lo += size
    rest = n - lo  # one round's worth at most: cut into `pieces` chunks that differ by one item at most
    pieces = min(rest, workers * TAIL_PIECES if out else workers)
    cuts = [lo + i * rest // pieces for i in range(pieces + 1)]
    return out + list(zip(cuts, cuts[1:]))


def _native_range(batch: Batch, lo: int, hi: int) -> tuple[bytes, bytes]:
    """Verify items [lo, hi) of ``batch`` in the native loop, on the batch's own columns."""
    loops = native.loops()
    assert loops is not None  # callers check native_family first
    base, end, off = message_span(batch.offsets, lo, hi)
    return loops.run(batch.scheme.family, batch.scheme.code, batch.pks[lo:hi], batch.sigs[lo:hi],
                     batch.msgs[base:end], off.astype(np.uint64), batch.prehashed, batch.allow_high_s)


#: Helper counts that mean "released": a GIL-holding call can still let the helper in
#: once per hand-off forced by some other thread; a releasing call lets it count hundreds
#: to thousands of times in the measurement.
MIN_COUNTS = 10


def releases_gil(fn, args: tuple, seconds: float = 0.02, switch_seconds: float = 0.1) -> bool:
    """Whether ``fn(*args)`` releases the GIL while it runs, measured, not assumed.

    A helper thread counts, yielding the GIL after each count, while this thread calls ``fn``
    for ``seconds`` (at least once) under a switch interval longer than that: this thread
    then gives up the GIL only where the library releases it, so the helper counts only
    then.  The answer does not depend on how busy the machine is (a neighbour slows both
    threads alike), unlike timing one thread against two.  The interpreter's switch interval
    is ``switch_seconds`` during the measurement, so another thread may wait up to that long.
    """
    state = {"count": 0, "measuring": False, "stop": False}
    started = threading.Event()

    def spin() -> None:
        started.set()
        while not state["stop"]:
            if state["measuring"]:
                state["count"] += 1
            time.sleep(0)  # hand the GIL back at once when the caller wants it

    old = sys.getswitchinterval()
    # Before the helper starts: its every wait for the GIL must use the long interval.
    sys.setswitchinterval(switch_seconds)
    helper = threading.Thread(target=spin, name="zv-gil-probe", daemon=True)
    try:
        helper.start()
        started.wait()
        state["measuring"] = True
        t0 = time.perf_counter()
        fn(*args)
        while time.perf_counter() - t0 < seconds:
            fn(*args)
        state["measuring"] = False
    finally:
        state["stop"] = True
        sys.setswitchinterval(old)
        helper.join()
    return state["count"] >= MIN_COUNTS


#: How often a process worker looks whether the server that started it is still there.
PARENT_POLL_SECONDS = 1.0


def _leave_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(0)


def _worker_init(server: int, claim_lock=None) -> None:
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


def _warm(_: int) -> int:
    # A task for every worker at start-up: the pool spawns its workers (each running
    # _worker_init) before the first batch rather than during it.
    return os.getpid()


def gil_release_by_family(skip: tuple[str, ...] = ()) -> dict[str, bool]:
    """Per scheme family not in ``skip``: whether its library releases the GIL while it
    verifies (:func:`releases_gil` on the family's first known answer).  Runs in a pool
    worker (:meth:`CpuBackend.measure_gil`)."""
    from app.engine.verify import kat

    answers = kat.known_answers()
    out: dict[str, bool] = {}
    for scheme in SCHEMES.values():
        if scheme.family in skip or scheme.family in out or not answers.get(scheme.id):
            continue
        it = answers[scheme.id][0].item
        fn = reference.verifier(scheme)
        args = (it.public_key, it.message, it.signature, it.context, it.prehashed, it.allow_high_s)
        # A "no" can come from a helper thread the OS did not run in time, a "yes" only
        # from a released GIL: ask up to three times.
        out[scheme.family] = any(releases_gil(fn, args) for _ in range(3))
    return out


class _ProcessPool(ProcessPoolExecutor):
    """``workers`` spawned worker processes of the server ``os.getpid()`` and the lock they
    share for claiming ranges of shared batches (``claim_lock``: shared_columns.Claims),
    made together so that a batch always fills under its own pool's lock."""

    def __init__(self, workers: int):
        spawn = multiprocessing.get_context("spawn")
        self.claim_lock = spawn.Lock()  # given to each worker as it starts
        super().__init__(workers, mp_context=spawn, initializer=_worker_init, initargs=(os.getpid(), self.claim_lock))


class CpuBackend:
    """Verifies every scheme with the reference libraries on ``workers`` cores.

    Args:
        workers: cores to use; 0 means ``os.cpu_count()``.
        chunk: items per work unit (the smallest claim of a shared process batch); 0 (the
            default) sizes them per scheme from the measured per-item cost (see the module
            docstring).
        parallelism: ``auto`` uses threads for the native loops and follows
            :data:`reference.RELEASES_GIL` for the rest; ``thread`` or ``process`` forces one
            kind of pool for every scheme (used by the benchmark).
        use_native: run Ed25519 and secp256k1 in the native loops where they build (False:
            every scheme verified in the Python loop, which tests compare against; leaf
            hashes and Merkle roots still use the loops wherever they are loaded).
        bls_batch: verify BLS12-381 chunks by random linear combination
            (app/engine/verify/bls_batch.py); off, one CoreVerify per item.  Same verdicts either
            way; on is faster from a few items up (bench/results/bls_batch.md).
        shared_memory: hand process chunks over in shared memory where there is room (off:
            always through the pool's pipe, which the benchmark compares against).
    """

    name = "cpu"

    def __init__(self, workers: int = 0, chunk: int = 0, parallelism: Parallelism = "auto",
                 use_native: bool = True, bls_batch: bool = True, shared_memory: bool = True):
        self.workers = workers or os.cpu_count() or 1
        self.bls_batch = bls_batch
        self.chunk = max(0, chunk)
        self.parallelism = parallelism
        self.use_native = use_native
        #: Measured single-core seconds per item, per scheme id (moving average).
        self.item_seconds: dict[str, float] = {}
        #: Per scheme family: whether its library call releases the GIL, measured by
        #: :meth:`warm_up` (:func:`releases_gil`); :data:`reference.RELEASES_GIL` until then.
        self.gil_released: dict[str, bool] = {}
        #: Wall seconds per item of parallel batches, per (scheme id, on processes): what
        #: :meth:`uses_processes` compares where the library releases the GIL.
        self.kind_seconds: dict[tuple[str, bool], float] = {}
        self._since_revisit: dict[str, int] = {}
        self._kind_trials: dict[tuple[str, bool], list[float]] = {}
        self._threads: ThreadPoolExecutor | None = None
        self._procs: _ProcessPool | None = None
        self._lock = threading.Lock()
        self._closed = False  # a warm-up still running when close() came starts no new pool
        self.shared_memory = shared_memory
        self._segments = shared_columns.SegmentPool()

    def available(self) -> bool:
        return True

    def schemes(self) -> frozenset[str]:
        return frozenset(SCHEMES)

    def native_family(self, scheme: Scheme) -> bool:
        """Whether ``scheme`` runs in a native loop here (built, and not turned off)."""
        return self.use_native and scheme.family in native.FAMILIES and native.loops() is not None

    def uses_processes(self, scheme: Scheme) -> bool:
        """Whether ``scheme``'s next parallel batch runs on the process pool: forced by
        ``parallelism``; never for the native loops; always where the library holds the GIL;
        else as measured (module docstring): both in turn, then the faster."""
        if self.parallelism != "auto":
            return self.parallelism == "process"
        if self.native_family(scheme):
            return False  # the ctypes call releases the GIL for the whole chunk
        if not self.gil_released.get(scheme.family, reference.RELEASES_GIL[scheme.family]):
            return True  # threads would take turns at the GIL
        tried = [len(self._kind_trials.get((scheme.id, kind), ())) for kind in (False, True)]
        if min(tried) < KIND_TRIALS:
            return tried[0] > tried[1]  # not measured enough yet: threads and processes in turn
        faster = self.kind_seconds[(scheme.id, True)] < self.kind_seconds[(scheme.id, False)]
        return faster != (self._since_revisit.get(scheme.id, 0) >= REVISIT_BATCHES)

    def _measured_kind(self, scheme: Scheme, processes: bool, n: int, seconds: float) -> None:
        key = (scheme.id, processes)
        trials = self._kind_trials.setdefault(key, [])
        if len(trials) < KIND_TRIALS:
            trials.append(seconds / n)
            self.kind_seconds[key] = statistics.median(trials)
            return
        mine, other = self.kind_seconds[key], self.kind_seconds.get((scheme.id, not processes))
        # A batch on the kind that was the slower one is a revisit: count the next period afresh.
        revisit = other is not None and mine > other
        count = self._since_revisit.get(scheme.id, 0)
        self._since_revisit[scheme.id] = 0 if revisit or other is None else count + 1
        self.kind_seconds[key] = _ewma(mine, seconds / n, _KIND_EWMA)

    def measure_gil(self) -> dict[str, bool]:
        """Measure, per scheme family, whether its library releases the GIL (one known answer
        of the family's first scheme, a few calls: milliseconds); fills :attr:`gil_released`.

        Measured in a worker of the process pool (started here if need be): the measurement
        lengthens the interpreter's switch interval to 100 ms, which in the server's own
        process would stall its event loop (``/healthz``) for as long.
        """
        procs = self._executor(True)
        try:
            self.gil_released.update(procs.submit(gil_release_by_family, tuple(self.gil_released)).result())
        except (CancelledError, BrokenProcessPool):
            if not self._closed:  # closed while measuring: nothing to fill in
                raise
        return dict(self.gil_released)

    def chunk_items(self, scheme: Scheme) -> int:
        """Items per chunk for ``scheme``: fixed when configured, else ``CHUNK_SECONDS`` of the
        measured per-item cost (``DEFAULT_CHUNK`` before the first measurement)."""
        if self.chunk:
            return self.chunk
        cost = self.item_seconds.get(scheme.id)
        if cost is None:
            return DEFAULT_CHUNK
        return max(1, min(4096, int(CHUNK_SECONDS[self.uses_processes(scheme)] / max(cost, 1e-9))))

    def claim_items(self, scheme: Scheme, n: int) -> int:
        """The smallest range a process worker claims of a shared batch of ``n`` items: the
        fixed chunk where one is configured, else ``CLAIM_SECONDS`` of the measured per-item
        cost (1 before the first measurement); never above an equal share per worker, so that
        a batch of at most workers × that many items is shared equally."""
        cost = self.item_seconds.get(scheme.id)
        least = self.chunk or (1 if cost is None else max(1, int(CLAIM_SECONDS / max(cost, 1e-9))))
        return min(least, -(-n // self.workers))

    def _measured(self, scheme: Scheme, n: int, seconds: float, parallel: int) -> None:
        # Wall time over items, times the cores that shared the work: single-core cost.
        self.item_seconds[scheme.id] = _ewma(self.item_seconds.get(scheme.id), seconds * parallel / n, 0.3)

    def _executor(self, processes: bool) -> Executor:
        pool = self._procs if processes else self._threads
        if pool is not None:  # no lock: a new process pool's start (seconds) must not hold up the threads
            return pool
        with self._lock:
            if processes:
                if self._procs is None:
                    self._procs = _ProcessPool(self.workers)
                    list(self._procs.map(_warm, range(self.workers)))
                return self._procs
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="zv-cpu")
            return self._threads

    def warm_up(self) -> None:
        """Build the native loops and start the pools the registry will need, so the first
        batch pays no start-up."""
        native.loops()
        if self.parallelism == "auto":
            self.measure_gil()
        if self._closed:
            return
        kinds = {self.uses_processes(s) for s in SCHEMES.values()}
        for procs in kinds:
            self._executor(procs)
        if True not in kinds:
            with self._lock:  # started only to measure in: no scheme runs there
                if self._procs is not None:
                    self._procs.shutdown(wait=True)
                    self._procs = None

    def verify(self, batch: Batch) -> np.ndarray:
        """Verify ``batch``; returns ``bool[N]`` in item order.  Never raises for bad items."""
        return self.verify_with_leaves(batch)[0]

    def verify_with_leaves(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Verify ``batch`` and hash its Merkle leaves (docs/architecture.md, "Merkle leaf and
        receipts") on the same cores.

        Returns (``bool[N]`` verdicts, ``uint8[N, 32]`` leaf hashes) in item order.
        """
        n = len(batch)
        if n == 0:
            return np.zeros(0, dtype=bool), np.zeros((0, 32), dtype=np.uint8)
        bounds = chunk_bounds(n, self.chunk_items(batch.scheme), self.workers)
        use_native = self.native_family(batch.scheme)
        parallel = 1 if self.workers == 1 else min(self.workers, len(bounds))
        if parallel == 1:
            t0 = time.perf_counter()
            parts = [_native_range(batch, lo, hi) if use_native
                     else _verify_range(*_chunk_args(batch, lo, hi, False, self.bls_batch)) for lo, hi in bounds]
        else:
            processes = self.uses_processes(batch.scheme)
            ex = self._executor(processes)
            t0 = time.perf_counter()  # after the pool's start-up, which is no per-item cost
            if processes:
                for last in (False, True):  # a worker died (the OOM killer, a crash): a new pool, once
                    try:
                        parts = self._on_processes(ex, batch, bounds, use_native)
                        break
                    except BrokenProcessPool as exc:
                        self._replace_broken(ex)
                        if last:
                            raise BackendUnavailable("CPU worker processes died twice during this batch; "
                                                     "retry it") from exc
                    ex = self._executor(True)
                    t0 = time.perf_counter()  # the failed try and the new pool's start are no per-item cost
            else:
                parts = [f.result() for f in [ex.submit(_native_range, batch, lo, hi) if use_native
                                              else self._through_pipe(ex, batch, lo, hi, False) for lo, hi in bounds]]
        seconds = time.perf_counter() - t0
        if parallel > 1 and len(bounds) >= self.workers:  # every core had work: a fair measure of the kind
            self._measured_kind(batch.scheme, processes, n, seconds)
        self._measured(batch.scheme, n, seconds, parallel)
        verdicts = np.frombuffer(b"".join(p[0] for p in parts), dtype=np.uint8).astype(bool)
        leaves = np.frombuffer(b"".join(p[1] for p in parts), dtype=np.uint8).reshape(n, 32)
        return verdicts, leaves

    def _replace_broken(self, ex: Executor) -> None:
        """Forget the process pool ``ex``, which a dead worker broke (it cannot run another
        task), so that :meth:`_executor` starts a new one; another thread may have done so."""
        with self._lock:
            if self._procs is not ex:
                return
            self._procs = None
        log.warning("a CPU worker process died; starting a new process pool")
        # Not wait=True: on Python 3.11 the broken pool's manager thread can wait for ever on
        # a feeder thread stuck writing a chunk to a dead worker (CPython gh-94777); the pool
        # has terminated its workers already.
        ex.shutdown(wait=False, cancel_futures=True)

    def _through_pipe(self, ex: Executor, batch: Batch, lo: int, hi: int, use_native: bool) -> Future:
        """Items [lo, hi) sent to ``ex`` as bytes (to a process worker: through the pool's pipe)."""
        return ex.submit(_verify_range, *_chunk_args(batch, lo, hi, use_native, self.bls_batch))

    def _on_processes(self, ex: Executor, batch: Batch, bounds: list[tuple[int, int]],
                      use_native: bool) -> list[tuple[bytes, bytes]]:
        """(verdicts, leaves) of ``batch`` from the process pool ``ex``, in order.

        Where a shared-memory segment can be had (app/engine/backends/shared_columns.py),
        the batch is copied into it and each worker gets one task: to claim ranges of it
        until none is left, writing their verdicts and leaves back.  Else the chunks
        ``bounds`` go through the pipe; so do, cut the same way, the ranges no worker did
        because it could not open the segment (removed by someone else: it is not reused).

        Raises:
            BrokenProcessPool: a worker of ``ex`` died.
        """
        seg = self._segments.take(shared_columns.shared_size(batch)) if self.shared_memory else None
        if seg is None:
            return [f.result() for f in [self._through_pipe(ex, batch, lo, hi, use_native) for lo, hi in bounds]]
        assert isinstance(ex, _ProcessPool)
        futures: list[Future] = []
        shared: shared_columns.SharedBatch | None = None
        try:
            shared = shared_columns.SharedBatch(batch, seg)
            args = (shared.name, shared.layout, batch.scheme.id, batch.ctx, batch.prehashed, batch.allow_high_s,
                    use_native, self.bls_batch, self.claim_items(batch.scheme, len(batch)), self.workers)
            for _ in range(self.workers):  # one at a time: a failed submit must not lose those already made
                futures.append(ex.submit(_shared_batch, *args))
            try:
                shared.fill(ex.claim_lock, lambda: any(_broke(f) for f in futures))
            except TimeoutError:
                broke = next((f for f in futures if _broke(f)), None)
                if broke is not None:  # a worker died, perhaps holding the lock: the pool is broken
                    raise BrokenProcessPool("a worker died while the batch was copied in") from broke.exception()
                raise
        except BaseException:
            if shared is not None:
                shared.stop()
            raise
        finally:
            wait(futures)  # a failed batch too: no worker may still read the segment when it is reused
            gone = any(not f.cancelled() and isinstance(f.exception(), SegmentGone) for f in futures)
            verdicts, leaves = shared.results() if shared is not None else (b"", b"")
            # A broken pool fails its futures before it terminates the workers still running:
            # one may yet claim from this segment, so it is not offered to another batch.
            self._segments.give(seg, reuse=not gone and not any(_broke(f) for f in futures))
        done = [span for f in futures if not isinstance(f.exception(), SegmentGone) for span in f.result()]
        missing = _missing(done, len(batch))
        if not missing:
            return [(verdicts, leaves)]
        flags, hashes = bytearray(verdicts), bytearray(leaves)
        full = self.chunk_items(batch.scheme)
        pieces = [(lo + a, lo + z) for lo, hi in missing for a, z in chunk_bounds(hi - lo, full, self.workers)]
        for (lo, hi), f in zip(pieces, [self._through_pipe(ex, batch, lo, hi, use_native) for lo, hi in pieces]):
            flags[lo:hi], hashes[32 * lo:32 * hi] = f.result()
        return [(bytes(flags), bytes(hashes))]

    def verify_aggregate(self, items: Sequence[AggregateItem]) -> tuple[np.ndarray, np.ndarray]:
        """Verify BLS aggregate items (app/engine/verify/bls_aggregate.py) on the thread pool.

        Returns (``bool[N]`` verdicts, ``uint8[N, 32]`` aggregate leaf hashes) in item order;
        never raises for bad items.  arkworks releases the GIL, so threads use every core.
        """
        n = len(items)
        if n == 0:
            return np.zeros(0, dtype=bool), np.zeros((0, 32), dtype=np.uint8)
        if n == 1 or self.workers == 1:
            parts = [bls_aggregate.verify_with_leaf(it) for it in items]
        else:
            parts = list(self._executor(False).map(bls_aggregate.verify_with_leaf, items))
        verdicts = np.fromiter((ok for ok, _ in parts), dtype=bool, count=n)
        leaves = np.frombuffer(b"".join(leaf for _, leaf in parts), dtype=np.uint8).reshape(n, 32)
        return verdicts, leaves

    def close(self) -> None:
        with self._lock:
            self._closed = True
            # Wait for the workers: a spawned process left behind keeps the parent's stdout
            # open, which hangs whoever reads it (a pipe, CI's log).
            if self._threads is not None:
                self._threads.shutdown(wait=True, cancel_futures=True)
                self._threads = None
            if self._procs is not None:
                self._procs.shutdown(wait=True, cancel_futures=True)
                self._procs = None
        self._segments.close()
