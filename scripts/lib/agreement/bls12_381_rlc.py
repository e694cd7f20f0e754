"""``scripts/agreement --scheme bls12-381-rlc``: BLS12-381 batches verified by random linear
combination on the device (app.engine.device.ops.verify_bls_rlc, host build: the kernel-host
backend's path for a ``bls12-381`` batch) against arkworks' single CoreVerify, item by item.

Each chunk is one batch: its valid items and its mutants (every kind of
:data:`scripts.lib.agreement.bls12_381.MUTANT_KINDS`, the single-verify suite's) shuffled
together, so groups hold invalid members at every position and most of them fail and fall
back to single verifies, as a batch with a bad item does in service.  Every verdict must
equal arkworks' for that item alone (docs/bls-aggregate.md, section 4).  ZV_CHECK
failures are counted in both libraries the path runs (bls12_381 and bls12_381_aggregate).
"""

from __future__ import annotations

import random
import time

import numpy as np

from app.core.batch import Batch, Item
from app.core.schemes import SCHEMES
from app.engine.device import hostbuild, hostlib, ops, registry
from app.engine.reference import kat
from scripts.lib.agreement import CheckFailures, Chunk, Tally, compare, host_library
from scripts.lib.agreement import bls12_381 as single

SCHEME = "bls12-381-rlc"
TITLE = "BLS12-381 batches by random linear combination (host build) vs arkworks"
RESULTS = "bls_rlc_agreement"
KERNEL = "zv_bls_rlc_* + zv_verify_bls12_381 fallback (host build, through app.engine.device.ops.verify_bls_rlc)"
REFERENCE, REFERENCE_SHORT = single.REFERENCE, single.REFERENCE_SHORT
VERSIONS = single.VERSIONS
SETS = ["bls12-381"]
DEFAULTS = {"valid": 20_000, "mutated": 20_000}
#: Items per batch: two RLC groups of 64 and a part of a third.
CHUNK = 80
VALID_KINDS = ("valid",)
MUTANT_KINDS = single.MUTANT_KINDS


def aggregate_library():
    return hostbuild.load(registry.BLS_AGGREGATE.name, registry.BLS_AGGREGATE.directory)


def batch_verdicts(items: list[Item]) -> dict[int, bool]:
    """Verdicts of ``items`` as one batch through verify_bls_rlc, by ``id`` of each item."""
    scheme = SCHEMES[single.SCHEME]
    batch = Batch.from_items(scheme, [it.public_key for it in items], [it.message for it in items],
                             [it.signature for it in items])
    verdicts, _ = ops.verify_bls_rlc(hostlib.device(), registry.VERIFY_KERNELS[single.SCHEME], batch)
    return {id(it): bool(v) for it, v in zip(items, np.asarray(verdicts).tolist(), strict=True)}


def prepare(args) -> None:
    host_library(single.SCHEME)
    aggregate_library()


def run_chunk(chunk: Chunk) -> Tally:
    rng = random.Random(f"bls-rlc-agreement/{chunk.seed}/{chunk.index}")
    n_valid = chunk.counts["valid"]
    valid = kat.sign_items(single.SCHEME, n_valid, seed=40_000 * chunk.seed + chunk.index)
    others = kat.sign_items(single.SCHEME, max(1, n_valid), seed=40_000 * chunk.seed + 40_000 + chunk.index)
    groups: dict[str, list[Item]] = {"valid": valid}
    for j in range(chunk.counts["mutated"]):
        kind = MUTANT_KINDS[(chunk.index * 7 + j) % len(MUTANT_KINDS)]
        k = j % len(valid)
        groups.setdefault(kind, []).append(single.mutant(valid[k], kind, others[k % len(others)], rng))
    batch = [it for items in groups.values() for it in items]
    rng.shuffle(batch)
    tally = Tally()
    with CheckFailures(tally, chunk.set_id, host_library(single.SCHEME)), \
            CheckFailures(tally, chunk.set_id, aggregate_library()):
        t0 = time.perf_counter()
        got = batch_verdicts(batch)
        per_item = (time.perf_counter() - t0) / len(batch)
        for kind, items in groups.items():
            compare(tally, chunk.set_id, kind, items, lambda its: [got[id(it)] for it in its],
                    single.reference_verdicts)
            # The kernel ran once for the whole batch: each kind is given its items' share of it.
            tally.count(chunk.set_id, kind, kernel_s=per_item * len(items))
    return tally
