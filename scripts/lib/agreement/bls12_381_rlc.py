"""``scripts/agreement --scheme bls12-381-rlc``: BLS12-381 batches verified by random linear
combination on the device (app.engine.device.ops.verify_bls_rlc, host build: the kernel-host
backend's path for a ``bls12-381`` batch) against arkworks' single CoreVerify, item by item.

Each chunk is one batch: its valid items and its mutants (every kind of
:data:`scripts.lib.agreement.bls12_381.MUTANT_KINDS`, the single-verify suite's) shuffled
together, so groups hold invalid members at every position and most of them fail and fall
back to single verifies, as a batch with a bad item does in service.  Every verdict must
equal arkworks' for that item alone (docs/bls-aggregate.md, section 4).  ZV_CHECK
failures are counted in both libraries the path runs (bls12_381 and bls12_381_aggregate).
``--path blst``: the same batches through the CPU backend's blst loop by random linear
combination (app/engine/backends/native_bls.py), into bls_rlc_blst_agreement.{json,md}.
"""

from __future__ import annotations

import numpy as np

from app.core.batch import Batch, Item
from app.core.schemes import SCHEMES
from app.engine.device import hostlib, ops, registry
from scripts.lib.agreement import CheckFailures, Chunk, Tally, compare_launched, host_library
from scripts.lib.agreement import bls12_381 as single
from scripts.lib.agreement import bls12_381_aggregate as aggregates

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
#: Per ``--path``: (TITLE, RESULTS, KERNEL).
RUNS = {
    "kernel": (TITLE, RESULTS, KERNEL),
    "blst": ("BLS12-381 batches by random linear combination on blst (the CPU backend's loop) vs arkworks",
             "bls_rlc_blst_agreement", "zv_bls_verify on blst by random linear combination, bisection and "
             "single checks (app/engine/backends/native_bls.py)"),
}
OPTIONS = ("path",)
add_arguments = single.add_arguments


def configure(args) -> None:
    global TITLE, RESULTS, KERNEL
    TITLE, RESULTS, KERNEL = RUNS[args.path]


def batch_verdicts(items: list[Item]) -> list[bool]:
    """Verdicts of ``items`` as one batch through verify_bls_rlc, in order."""
    batch = Batch.from_items(SCHEMES[single.SCHEME], [it.public_key for it in items], [it.message for it in items],
                             [it.signature for it in items])
    verdicts, _ = ops.verify_bls_rlc(hostlib.device(), registry.VERIFY_KERNELS[single.SCHEME], batch)
    return np.asarray(verdicts).tolist()


def prepare(args) -> None:
    if args.path == "blst":
        single.prepare(args)
        return
    host_library(single.SCHEME)
    aggregates.library()


def run_chunk(chunk: Chunk) -> Tally:
    groups, rng = single.chunk_items(chunk, "bls-rlc-agreement", 40_000)
    order = [it for items in groups.values() for it in items]
    rng.shuffle(order)  # valid and invalid members at every position of the batch's groups
    tally = Tally()
    if chunk.options.get("path") == "blst":
        compare_launched(tally, chunk.set_id, groups, lambda every: single.blst_verdicts(every, rlc=True),
                         single.reference_verdicts, order=order)
        return tally
    with CheckFailures(tally, chunk.set_id, host_library(single.SCHEME)), \
            CheckFailures(tally, chunk.set_id, aggregates.library()):
        compare_launched(tally, chunk.set_id, groups, batch_verdicts, single.reference_verdicts, order=order)
    return tally
