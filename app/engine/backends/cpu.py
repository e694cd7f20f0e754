"""The CPU backend: the reference libraries, spread over every core.

A batch is cut into chunks of ``chunk`` items.  Libraries that release the GIL
(:data:`app.engine.verify.reference.RELEASES_GIL`) run their chunks on a thread pool; the others
on a pool of worker processes (started with ``spawn``, so a threaded server is never
forked), to which a chunk travels as a few byte strings rather than Python objects.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Literal

import numpy as np

from app.engine.commit import merkle
from app.engine.verify import bls_aggregate, reference
from app.engine.verify.batch import AggregateItem, Batch
from app.engine.verify.bls_batch import BlsBatchVerifier
from app.engine.verify.schemes import SCHEMES, Scheme

Parallelism = Literal["auto", "thread", "process"]

#: One per process: its running invalid-fraction estimate sizes the groups of every chunk.
_BLS_BATCH = BlsBatchVerifier()


def _verify_range(scheme_id: str, pk_len: int, pks: bytes, sigs: bytes, msgs: bytes,
                  offsets: list[int], ctx: bytes, prehashed: bool, allow_high_s: bool,
                  bls_batch: bool = False) -> tuple[bytes, bytes]:
    """Verify a chunk given as flat bytes.

    BLS12-381 chunks go through :class:`BlsBatchVerifier` when ``bls_batch`` is set (same
    verdicts as the one-by-one loop, see app/engine/verify/bls_batch.py).

    Returns (one verdict byte per item, the 32-byte Merkle leaf hash of each item): the
    leaves are hashed here so that they too are spread over the cores.  Runs in a worker
    process or thread; ``offsets`` are relative to ``msgs``.
    """
    scheme = SCHEMES[scheme_id]
    fn = reference.verifier(scheme)
    sig_len, code = scheme.sig_len, scheme.code
    n = len(offsets) - 1
    out = bytearray(n)
    leaves = []
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
    for i, (pk, msg, sig) in enumerate(rows):
        out[i] = 1 if verdicts[i] else 0
        leaves.append(merkle.leaf_hash(code, verdicts[i], pk, msg, sig))
    return bytes(out), b"".join(leaves)


def _chunk_args(batch: Batch, lo: int, hi: int, bls_batch: bool) -> tuple:
    off = batch.offsets[lo:hi + 1].astype(np.int64)
    base = int(off[0])
    return (batch.scheme.id, batch.pks.shape[1], batch.pks[lo:hi].tobytes(), batch.sigs[lo:hi].tobytes(),
            batch.msgs[base:int(off[-1])].tobytes(), (off - base).tolist(), batch.ctx, batch.prehashed,
            batch.allow_high_s, bls_batch)


def _warm(_: int) -> int:
    # Import every library in the worker before the first real batch arrives.
    for s in SCHEMES.values():
        reference.verifier(s)
    return os.getpid()


class CpuBackend:
    """Verifies every scheme with the reference libraries on ``workers`` cores.

    Args:
        workers: cores to use; 0 means ``os.cpu_count()``.
        chunk: items per work unit (smaller spreads better, larger costs less overhead).
        parallelism: ``auto`` follows :data:`reference.RELEASES_GIL`; ``thread`` or
            ``process`` forces one kind of pool for every scheme (used by the benchmark).
        bls_batch: verify BLS12-381 chunks by random linear combination
            (app/engine/verify/bls_batch.py); off, one CoreVerify per item.  Same verdicts either
            way; on is faster from a few items up (bench/results/bls_batch.md).
    """

    name = "cpu"

    def __init__(self, workers: int = 0, chunk: int = 256, parallelism: Parallelism = "auto",
                 bls_batch: bool = True):
        self.workers = workers or os.cpu_count() or 1
        self.bls_batch = bls_batch
        self.chunk = max(1, chunk)
        self.parallelism = parallelism
        self._threads: ThreadPoolExecutor | None = None
        self._procs: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def available(self) -> bool:
        return True

    def schemes(self) -> frozenset[str]:
        return frozenset(SCHEMES)

    def uses_processes(self, scheme: Scheme) -> bool:
        if self.parallelism != "auto":
            return self.parallelism == "process"
        return not reference.RELEASES_GIL[scheme.family]

    def _executor(self, processes: bool) -> Executor:
        with self._lock:
            if processes:
                if self._procs is None:
                    self._procs = ProcessPoolExecutor(self.workers,
                                                      mp_context=multiprocessing.get_context("spawn"))
                    list(self._procs.map(_warm, range(self.workers)))
                return self._procs
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="zv-cpu")
            return self._threads

    def warm_up(self) -> None:
        """Start the pools the registry will need, so the first batch pays no start-up."""
        for procs in {self.uses_processes(s) for s in SCHEMES.values()}:
            self._executor(procs)

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
        # Enough chunks to keep every worker busy, none larger than self.chunk.
        size = max(1, min(self.chunk, -(-n // self.workers)))
        bounds = [(lo, min(n, lo + size)) for lo in range(0, n, size)]
        if len(bounds) == 1 or self.workers == 1:
            parts = [_verify_range(*_chunk_args(batch, lo, hi, self.bls_batch)) for lo, hi in bounds]
        else:
            ex = self._executor(self.uses_processes(batch.scheme))
            futures = [ex.submit(_verify_range, *_chunk_args(batch, lo, hi, self.bls_batch)) for lo, hi in bounds]
            parts = [f.result() for f in futures]
        verdicts = np.frombuffer(b"".join(p[0] for p in parts), dtype=np.uint8).astype(bool)
        leaves = np.frombuffer(b"".join(p[1] for p in parts), dtype=np.uint8).reshape(n, 32)
        return verdicts, leaves

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
            # Wait for the workers: a spawned process left behind keeps the parent's stdout
            # open, which hangs whoever reads it (a pipe, CI's log).
            if self._threads is not None:
                self._threads.shutdown(wait=True, cancel_futures=True)
                self._threads = None
            if self._procs is not None:
                self._procs.shutdown(wait=True, cancel_futures=True)
                self._procs = None
