"""The CPU backend: the reference libraries, spread over every core.

The backend is in four modules, one job each: this one is the backend the engine holds
(:class:`CpuBackend`: its pools and their start, which pool and in which chunks a batch runs,
a broken process pool replaced); :mod:`app.engine.backends.cpu_worker` is what runs in a
pool worker, process or thread (verifying one chunk, a spawned worker's start-up and exit);
:mod:`app.engine.backends.cpu_policy` is the fixed policy (pool kind per family, chunk and
claim sizes); :mod:`app.engine.backends.shared_columns` hands process batches over in shared
memory.

A batch is cut into chunks of about ``CHUNK_SECONDS`` of its scheme's measured per-item cost
(:func:`app.engine.backends.cpu_policy.chunk_bounds`), and its chunks run on the pool that
the fixed policy of :mod:`app.engine.backends.cpu_policy` names (the evidence is there and
in docs/architecture.md, "CPU backend").  Ed25519, secp256k1, BIP-340 and ML-DSA chunks run
in the native loops of :mod:`app.engine.backends.native` where those build (the libraries'
own C entry points, or for ML-DSA our own vectorized verify, over whole columns, leaf hashes
in the same pass, GIL released), on a thread pool, the columns passed without a copy.
Every chunk in the Python loop over :mod:`app.engine.reference.reference` runs on a pool of
worker processes (started with
``spawn``, so a threaded server is never forked).  The server copies a process batch into a
shared-memory segment and each worker claims ranges of it until none is left
(:mod:`app.engine.backends.shared_columns`, :func:`cpu_worker.shared_batch`), the claims
shrinking to ``CLAIM_SECONDS`` of work; where there is no room for a segment, chunks go
through the pool's pipe as a few byte strings (:func:`cpu_worker.chunk_args`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Literal

import numpy as np

from app.core.batch import AggregateBatch, AggregateItem, Batch
from app.core.errors import BackendUnavailable, SegmentGone
from app.core.result import Result
from app.core.schemes import SCHEMES, Scheme
from app.engine.backends import cpu_policy, cpu_worker, native, shared_columns
from app.engine.backends.base import READY, Backend, Capabilities
from app.engine.backends.cpu_policy import PoolKind, chunk_bounds
from app.engine.reference import bls_aggregate

log = logging.getLogger("zapverify.engine")

#: ``auto``: the fixed policy (:func:`cpu_policy.pool_kind`); ``thread``/``process``: that pool for every scheme.
Parallelism = Literal["auto", "thread", "process"]

#: What the CPU backend declares: it serves every scheme and BLS aggregate items.
_CAPABILITIES = Capabilities(schemes={s: READY for s in SCHEMES}, aggregates=True)


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


class _ProcessPool(ProcessPoolExecutor):
    """``workers`` spawned worker processes of the server ``os.getpid()`` and the lock they
    share for claiming ranges of shared batches (``claim_lock``: shared_columns.Claims),
    made together so that a batch always fills under its own pool's lock."""

    def __init__(self, workers: int):
        spawn = multiprocessing.get_context("spawn")
        self.claim_lock = spawn.Lock()  # given to each worker as it starts
        super().__init__(workers, mp_context=spawn, initializer=cpu_worker.init_worker,
                         initargs=(os.getpid(), self.claim_lock))


class CpuBackend(Backend):
    """Verifies every scheme with the reference libraries on ``workers`` cores.

    Args:
        workers: cores to use; 0 means ``os.cpu_count()``.
        chunk: items per work unit (the smallest claim of a shared process batch); 0 (the
            default) sizes them per scheme from the measured per-item cost
            (:func:`cpu_policy.chunk_items`, :func:`cpu_policy.claim_items`).
        parallelism: ``auto`` runs each chunk on the pool the fixed policy names
            (:func:`cpu_policy.pool_kind`: threads for the native loops, processes for the
            Python loop); ``thread`` or ``process`` forces one kind of pool for every scheme
            (tests and the benchmark compare them).
        use_native: run the native loops' families (Ed25519, secp256k1, BIP-340, ML-DSA and
            BLS12-381 on blst, items and aggregates) in them where they build (False: every
            scheme verified in the Python loop, which tests compare against; leaf hashes and
            Merkle roots still use the loops wherever they are loaded).
        bls_batch: verify BLS12-381 chunks by random linear combination
            (app/engine/reference/bls_batch.py); off, one CoreVerify per item.  Same verdicts either
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
        #: Measured single-core seconds per item, per scheme id (:func:`cpu_policy.item_cost`).
        self.item_seconds: dict[str, float] = {}
        self._threads: ThreadPoolExecutor | None = None
        self._procs: _ProcessPool | None = None
        self._lock = threading.Lock()
        self._closed = False  # a warm-up still running when close() came starts no new pool
        self.shared_memory = shared_memory
        self._segments = shared_columns.SegmentPool()

    def capabilities(self) -> Capabilities:
        """Every scheme of the registry, BLS aggregate items, leaves hashed beside the verdicts;
        no device (nothing to calibrate against itself)."""
        return _CAPABILITIES

    def run(self, batch: Batch | AggregateBatch, *, commit: bool = False) -> Result:
        """Verify ``batch`` and hash its Merkle leaves (docs/architecture.md, "Merkle leaf and
        receipts") on the same cores; ``commit`` asks nothing more (the engine's commit step
        builds the root from these leaves).

        Returns a :class:`Result` with ``bool[N]`` verdicts and ``uint8[N, 32]`` leaves in
        item order (aggregate leaves, :func:`app.engine.commit.merkle.aggregate_leaf`, for an
        :class:`AggregateBatch`).  Never raises for bad items; raises
        :class:`BackendUnavailable` when the worker processes die twice during one batch.
        """
        if isinstance(batch, AggregateBatch):
            return Result.of(self.name, *self._aggregate(batch.items))
        return Result.of(self.name, *self._columnar(batch))

    def native_family(self, scheme: Scheme) -> bool:
        """Whether ``scheme`` runs in a native loop here (built, and not turned off)."""
        loops = native.loops() if self.use_native and scheme.family in native.FAMILIES else None
        return loops is not None and scheme.family in loops.families

    def pool_kind(self, scheme: Scheme) -> PoolKind:
        """The pool ``scheme``'s parallel batches run on: forced by ``parallelism``, else the
        fixed policy (:func:`cpu_policy.pool_kind`: threads where the chunk runs in a native
        loop, processes where it runs in the Python loop)."""
        if self.parallelism != "auto":
            return self.parallelism
        return cpu_policy.pool_kind(scheme.family, self.native_family(scheme))

    def chunk_items(self, scheme: Scheme) -> int:
        """Items per full chunk for ``scheme``: fixed when configured, else
        :func:`cpu_policy.chunk_items` of its measured per-item cost on its pool kind."""
        return self.chunk or cpu_policy.chunk_items(self.item_seconds.get(scheme.id), self.pool_kind(scheme),
                                                    cpu_policy.least_chunk(scheme.family, self.native_family(scheme)))

    def claim_items(self, scheme: Scheme, n: int) -> int:
        """The smallest range a process worker claims of a shared batch of ``n`` items
        (:func:`cpu_policy.claim_items`: the fixed chunk where one is configured, else of the
        measured per-item cost)."""
        return cpu_policy.claim_items(self.item_seconds.get(scheme.id), n, self.workers, self.chunk)

    def _executor(self, processes: bool) -> Executor:
        pool = self._procs if processes else self._threads
        if pool is not None:  # no lock: a new process pool's start (seconds) must not hold up the threads
            return pool
        with self._lock:
            if processes:
                if self._procs is None:
                    self._procs = _ProcessPool(self.workers)
                    list(self._procs.map(cpu_worker.warm, range(self.workers)))
                return self._procs
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="zv-cpu")
            return self._threads

    def warm_up(self) -> None:
        """Build the native loops and start the pools the registry's schemes run on, so the
        first batch pays no start-up."""
        native.loops()
        for kind in sorted({self.pool_kind(s) for s in SCHEMES.values()}):
            if self._closed:  # closed while warming up: no new pool
                return
            self._executor(kind == "process")

    def _columnar(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """(``bool[N]`` verdicts, ``uint8[N, 32]`` leaf hashes) of a columnar batch."""
        n = len(batch)
        if n == 0:
            return np.zeros(0, dtype=bool), np.zeros((0, 32), dtype=np.uint8)
        bounds = chunk_bounds(n, self.chunk_items(batch.scheme), self.workers)
        use_native = self.native_family(batch.scheme)
        parallel = 1 if self.workers == 1 else min(self.workers, len(bounds))
        # Each part comes with the CPU seconds its worker spent on it (cpu_worker.timed).
        timed: list[tuple[tuple[bytes, bytes], float]]
        if parallel == 1:
            timed = [cpu_worker.timed(cpu_worker.native_range, batch, lo, hi, self.bls_batch) if use_native
                     else cpu_worker.timed(cpu_worker.verify_range,
                                           *cpu_worker.chunk_args(batch, lo, hi, False, self.bls_batch))
                     for lo, hi in bounds]
        else:
            processes = self.pool_kind(batch.scheme) == "process"
            ex = self._executor(processes)
            if processes:
                for last in (False, True):  # a worker died (the OOM killer, a crash): a new pool, once
                    try:
                        timed = self._on_processes(ex, batch, bounds, use_native)
                        break
                    except BrokenProcessPool as exc:
                        self._replace_broken(ex)
                        if last:
                            raise BackendUnavailable("CPU worker processes died twice during this batch; "
                                                     "retry it") from exc
                    ex = self._executor(True)
            else:
                timed = [f.result() for f in [ex.submit(cpu_worker.timed, cpu_worker.native_range, batch, lo, hi,
                                                        self.bls_batch)
                                              if use_native
                                              else self._through_pipe(ex, batch, lo, hi, False) for lo, hi in bounds]]
        parts = [part for part, _ in timed]
        # The workers' own CPU seconds over items: the single-core cost, whatever else ran.
        self.item_seconds[batch.scheme.id] = cpu_policy.item_cost(self.item_seconds.get(batch.scheme.id), n,
                                                                  sum(s for _, s in timed))
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
        """Items [lo, hi) sent to ``ex`` as bytes (to a process worker: through the pool's pipe);
        the future's result is :func:`cpu_worker.timed`'s."""
        return ex.submit(cpu_worker.timed, cpu_worker.verify_range,
                         *cpu_worker.chunk_args(batch, lo, hi, use_native, self.bls_batch))

    def _on_processes(self, ex: Executor, batch: Batch, bounds: list[tuple[int, int]],
                      use_native: bool) -> list[tuple[tuple[bytes, bytes], float]]:
        """(verdicts, leaves) of ``batch`` from the process pool ``ex``, in order, each with the
        CPU seconds its workers spent on it (as :func:`cpu_worker.timed`).

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
            args = (shared.name, shared.layout, batch.scheme.id, batch.ctx, batch.options, use_native, self.bls_batch,
                    self.claim_items(batch.scheme, len(batch)), self.workers)
            for _ in range(self.workers):  # one at a time: a failed submit must not lose those already made
                futures.append(ex.submit(cpu_worker.shared_batch, *args))
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
        results = [f.result() for f in futures if not isinstance(f.exception(), SegmentGone)]
        done = [span for spans, _ in results for span in spans]
        busy = sum(seconds for _, seconds in results)
        missing = _missing(done, len(batch))
        if not missing:
            return [((verdicts, leaves), busy)]
        flags, hashes = bytearray(verdicts), bytearray(leaves)
        full = self.chunk_items(batch.scheme)
        pieces = [(lo + a, lo + z) for lo, hi in missing for a, z in chunk_bounds(hi - lo, full, self.workers)]
        for (lo, hi), f in zip(pieces, [self._through_pipe(ex, batch, lo, hi, use_native) for lo, hi in pieces]):
            (flags[lo:hi], hashes[32 * lo:32 * hi]), seconds = f.result()
            busy += seconds
        return [((bytes(flags), bytes(hashes)), busy)]

    #: Keys from which an aggregate item is verified on the process pool, not the threads.
    AGGREGATE_PROCESS_KEYS = 64

    def _aggregate(self, items: Sequence[AggregateItem]) -> tuple[np.ndarray, np.ndarray]:
        """(``bool[N]`` verdicts, ``uint8[N, 32]`` aggregate leaf hashes) of BLS aggregate items
        on blst (:meth:`native_bls.BlsLoops.aggregate_item`) where the native loops load and are
        not turned off, else on arkworks (app/engine/reference/bls_aggregate.py), on the thread
        pool, except that items of :attr:`AGGREGATE_PROCESS_KEYS` keys or more go to the process
        pool: on arkworks, its per-key Python loops (decompress, sum by message) hold the GIL
        between its calls, and a 2,048-key request on threads made every other request of the
        process wait on the GIL (issue 48); on blst, a heavy item holds a pool thread for up to a
        second, and the native loops' chunks of other clients' small batches queued behind it
        (small Ed25519 requests' p99 7 s beside a heavy aggregate client, bench/overload.py)."""
        n = len(items)
        if n == 0:
            return np.zeros(0, dtype=bool), np.zeros((0, 32), dtype=np.uint8)
        loops = native.loops() if self.use_native else None
        one = cpu_worker.aggregate_with_leaf if loops is not None and loops.bls is not None \
            else bls_aggregate.verify_with_leaf
        heavy = any(len(it.public_keys) >= self.AGGREGATE_PROCESS_KEYS for it in items)
        if (n == 1 and not heavy) or self.workers == 1:
            parts = [one(it) for it in items]
        else:
            parts = list(self._executor(heavy).map(one, items))
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
