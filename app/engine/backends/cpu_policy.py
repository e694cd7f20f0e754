"""The CPU backend's fixed policy: which pool each scheme family runs on, and how a batch is cut.

Pool kind (docs/architecture.md, "CPU backend").  A chunk verified in a native loop
(:mod:`app.engine.backends.native`: Ed25519, secp256k1, BIP-340, ML-DSA, and BLS12-381 on
blst) is one ctypes call that releases the GIL for the whole chunk, so it runs on threads;
every chunk verified in the Python loop over :mod:`app.engine.reference.reference` runs on
worker processes, whether or not its library releases the GIL, because the Python between
the library calls (slicing, the loop, BLS batch verification's many short arkworks calls)
holds it.  Measured side by side, threads and processes forced for every scheme
(bench/results/cpu_engine.md: 2 cores, 4096-item batches, medians of 5 interleaved rounds),
items/s on threads against processes:

================  =========  ==========================================================
family            pool       threads vs processes
================  =========  ==========================================================
ed25519           thread     native loop: 35,948 vs 36,034 (equal)
secp256k1         thread     native loop: 52,224 vs 50,981 (equal)
p256              process    16,571 vs 20,991 (OpenSSL releases the GIL, 1.84x on two threads,
                             but the Python loop around it decides)
bip340            thread     native loop: 48,629 vs 48,820 (equal)
bls12-381         thread     native loop on blst (native_bls.py): 813 vs 772 (2026-12-06;
                             on arkworks' Python loop it was 715 vs 2,214, processes)
ml-dsa            thread     native loop (our own verify, native_ml_dsa.py); in the Python
                             loop over OpenSSL: 11,419 vs 14,392 (44), 7,619 vs 9,742 (65),
                             5,483 vs 6,586 (87)
slh-dsa           process    2.15–2.25× faster on processes in all twelve sets
================  =========  ==========================================================

Ed25519, secp256k1 and BIP-340 chunks that run in the Python loop (no native loop built, or
``use_native=False``) run on processes like every other Python-loop chunk.

Chunk size.  Every batch the backend runs updates its scheme's single-core seconds per item
(:func:`item_cost`, from the CPU time its workers spent), and a full chunk is
``CHUNK_SECONDS`` of that work for the pool kind (:func:`chunk_items`); :func:`chunk_bounds`
cuts a batch into such chunks, its last round smaller; the smallest range a process worker
claims of a batch in shared memory is ``CLAIM_SECONDS`` of work (:func:`claim_items`).
"""

from __future__ import annotations

from typing import Literal

from app.core.schemes import Family

PoolKind = Literal["thread", "process"]

#: The pool each family's chunks run on (module docstring: the evidence per row).  A
#: ``thread`` row holds for chunks in the family's native loop only; :func:`pool_kind`.
POOL_KIND: dict[Family, PoolKind] = {
    "ed25519": "thread",
    "secp256k1": "thread",
    "p256": "process",
    "bip340": "thread",
    "bls12-381": "thread",
    "ml-dsa": "thread",
    "slh-dsa": "process",
}

#: Seconds of single-core work per full chunk, by pool kind: a thread chunk costs tens of µs
#: to dispatch; a process chunk about half a millisecond of the server's CPU (pickles,
#: hand-offs between the executor's threads), taken from the cores the workers run on, so
#: 100 ms (bench/results/process_chunks.md).
CHUNK_SECONDS: dict[PoolKind, float] = {"thread": 0.004, "process": 0.1}
#: Seconds of single-core work in the smallest range a process worker claims of a batch in
#: shared memory (shared_columns.Claims): the last claims, which decide how long the first
#: core to finish waits for the last; each costs the worker some 50 µs of Python.
CLAIM_SECONDS = 0.002
#: Chunks per worker that a batch's last round of full chunks is cut into (:func:`chunk_bounds`).
TAIL_PIECES = 2
#: Items per chunk before a scheme has been measured.
DEFAULT_CHUNK = 64
#: Items per full chunk at least for BLS12-381 on blst's native loop, whose chunks are verified
#: by random linear combination: a group of n items shares one final exponentiation and one
#: signature Miller loop, so 4 ms chunks (about 6 items) would give up most of the gain
#: (bench/results/bls_batch.md).  128: a chunk's first group (16 items at most) and then full
#: groups of bls_batch.MAX_GROUP (64); a 256-item batch is two such chunks on two cores.
BLS_RLC_CHUNK = 128
#: Items per chunk at most, however cheap the items.
MAX_CHUNK = 4096
#: Weight of the newest batch in a scheme's running per-item cost.
COST_WEIGHT = 0.3


def pool_kind(family: Family, native_loop: bool) -> PoolKind:
    """The pool a chunk of ``family`` runs on: :data:`POOL_KIND`'s, except that a chunk in the
    Python loop (``native_loop`` false) always runs on processes.

    Raises:
        KeyError: ``family`` is not a family of the registry (:data:`app.core.schemes.Family`).
    """
    kind = POOL_KIND[family]
    return kind if native_loop else "process"


def item_cost(old: float | None, n: int, seconds: float) -> float:
    """A scheme's single-core seconds per item after a batch of ``n`` items (n ≥ 1) took its
    workers ``seconds`` of CPU time in all (:func:`app.engine.backends.cpu_worker.timed`):
    ``seconds / n`` alone at first (``old`` None), then a running average with
    ``COST_WEIGHT`` of the newest.  CPU time, not the batch's wall time: the wall time grows
    with the other batches sharing the pools, and a cost that grew with concurrency shrank the
    chunks until their dispatch was the work."""
    new = seconds / n
    return new if old is None else (1 - COST_WEIGHT) * old + COST_WEIGHT * new


def least_chunk(family: Family, native_loop: bool) -> int:
    """The fewest items a full chunk of ``family`` holds: ``BLS_RLC_CHUNK`` for BLS12-381 in
    its native loop (a chunk is what one random linear combination covers), else 1."""
    return BLS_RLC_CHUNK if family == "bls12-381" and native_loop else 1


def chunk_items(cost: float | None, kind: PoolKind, least: int = 1) -> int:
    """Items per full chunk for a scheme of single-core ``cost`` seconds per item on ``kind``:
    ``CHUNK_SECONDS[kind]`` of work, between ``least`` (:func:`least_chunk`) and
    ``MAX_CHUNK``; ``DEFAULT_CHUNK`` (at least ``least``) while ``cost`` is unmeasured (None)."""
    if cost is None:
        return max(least, DEFAULT_CHUNK)
    return max(least, 1, min(MAX_CHUNK, int(CHUNK_SECONDS[kind] / max(cost, 1e-9))))


def claim_items(cost: float | None, n: int, workers: int, fixed: int = 0) -> int:
    """The smallest range a process worker claims of a shared batch of ``n`` items: ``fixed``
    where set (> 0), else ``CLAIM_SECONDS`` of the single-core ``cost`` (1 while unmeasured,
    None); never above an equal share per worker, so that a batch of at most ``workers`` ×
    that many items is shared equally."""
    least = fixed or (1 if cost is None else max(1, int(CLAIM_SECONDS / max(cost, 1e-9))))
    return min(least, -(-n // workers))


def chunk_bounds(n: int, full: int, workers: int) -> list[tuple[int, int]]:
    """Item ranges ``[lo, hi)`` that cover ``0 … n`` in order, for ``workers`` cores and a
    full chunk of ``full`` items; none larger than ``full`` or an equal share.

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
