"""``scripts/agreement --scheme slh-dsa``: zv_verify_slh_dsa_<set> (host build) against
pqcrypto (FIPS 205 slh_verify, pure), all 12 parameter sets.

Valid items per chunk: one key, tests/slh_dsa_cases.sign_pool (cached on disk: contexts of
0, 1 and 255 bytes, messages of 0, 33 and 300 bytes), signed by the fast test signer
(tests/slh_dsa_signer.py, chunks of 200) or, with ``--signer pqcrypto``, by pqcrypto (chunks
of 6; put a --budget on it).  pqcrypto must accept every valid item, whoever signed it, and
reject every mutation.  Mutations (tests/slh_dsa_cases.mutants: one-bit flips in every part
of pk, msg, ctx and sig, contexts one byte longer/shorter or of 256 bytes, keys and
signatures one byte short/long, a longer message) are drawn round-robin over the chunk's
valid items with fresh random flips.

Each set's row also carries the compressions per verification (SHA-256 blocks, SHA-512
blocks, Keccak-f permutations) and their critical path on a 32-lane block, counted by the
-DZV_SLH_STATS host build over STATS_SAMPLE valid items: what ``scripts/gpu_model --scheme
slh-dsa`` turns into a predicted H200 rate.
"""

from __future__ import annotations

import ctypes
import os
import random

from scripts.lib import kernels
from scripts.lib.agreement import CheckFailures, Chunk, Tally, compare, host_library
from tests.slh_dsa_cases import SLH_IDS, kernel_verdicts, mutants, reference_verdicts, sign_pool

SCHEME = "slh-dsa"
TITLE = "SLH-DSA kernel (host build) vs pqcrypto: agreement"
RESULTS = "slh_dsa_agreement"
KERNEL = "zv_verify_slh_dsa_<set> (host build)"
REFERENCE, REFERENCE_SHORT = "pqcrypto", "pqcrypto"
VERSIONS = ("pqcrypto",)
SETS = list(SLH_IDS)
DEFAULTS = {"valid": 10_000, "mutated": 10_000}
VALID_KINDS = ("valid",)
OPTIONS = ("signer",)
CHUNKS = {"native": 200, "pqcrypto": 6}  # signatures per key, by signer
STATS_SAMPLE = 12  # valid items per set run through the counting build
HASHES = ("sha256", "sha512", "keccak_f")


def add_arguments(ap) -> None:
    ap.add_argument("--signer", choices=sorted(CHUNKS), default="native", help="who signs the valid items")


def chunk_size(args) -> int:
    return CHUNKS[args.signer]


def prepare(args) -> None:
    os.environ.setdefault("ZAPVERIFY_KAT_CACHE", str(kernels.ROOT / ".cache" / "kat"))  # the signed pools
    host_library(SETS[0])


def _pool(set_id: str, seed: int, index: int, count: int, signer: str) -> list:
    return sign_pool(set_id, count, seed=1000 * seed + index, signer=signer)


def run_chunk(chunk: Chunk) -> Tally:
    signer = chunk.options["signer"]
    valid = _pool(chunk.set_id, chunk.seed, chunk.index, chunk.counts["valid"], signer)
    rng = random.Random(f"slh-agreement/{chunk.set_id}/{chunk.seed}/{chunk.index}")
    groups: dict[str, list] = {"valid": valid}
    left, i = chunk.counts["mutated"], 0
    while left > 0:
        for kind, item in mutants(valid[i % len(valid)], rng)[:left]:
            groups.setdefault(kind, []).append(item)
            left -= 1
        i += 1
    lib = host_library(chunk.set_id)
    tally = Tally()
    with CheckFailures(tally, chunk.set_id, lib):
        for kind, items in groups.items():
            compare(tally, chunk.set_id, kind, items, lambda its: kernel_verdicts(lib, its), reference_verdicts,
                    expect=kind == "valid")
    return tally


def finish_set(set_id: str, args) -> dict:
    """Compressions per verify of the set, from the counting build (-DZV_SLH_STATS)."""
    from app.engine.device import hostbuild

    src = kernels.source("slh_dsa")
    lib = hostbuild.load_code(f'#define ZV_SLH_STATS 1\n#include "{src}"\n', "slh_dsa_stats", [src.parent])
    stats = (ctypes.c_uint64 * 6).in_dll(lib, "zv_slh_stats")
    for i in range(6):
        stats[i] = 0
    n = max(1, -(-args.valid // CHUNKS[args.signer]))  # chunk 0's pool, as plan() sized it (cached)
    items = _pool(set_id, args.seed, 0, args.valid // n + (args.valid % n > 0), args.signer)[:STATS_SAMPLE]
    if not all(kernel_verdicts(lib, items)):
        raise RuntimeError(f"{set_id}: the counting build rejected a valid item")
    k = len(items)
    per = {"total": {nm: stats[i] / k for i, nm in enumerate(HASHES)},
           "critical_path_32_lanes": {nm: stats[3 + i] / k for i, nm in enumerate(HASHES)}, "items": k}
    return {"signer": args.signer, "compressions_per_verify": per}


def notes(rows: list[dict]) -> list[str]:
    lines = [f"Compressions per verify, averaged over up to {STATS_SAMPLE} valid items per set by the -DZV_SLH_STATS "
             "host build; the critical path is the busiest lane's count summed over the barrier-separated phases of "
             "a 32-lane block (`scripts/gpu_model --scheme slh-dsa` turns it into a predicted H200 rate).", "",
             "| set | SHA-256 / verify | SHA-512 / verify | Keccak-f / verify | critical path (32 lanes) |",
             "|---|---:|---:|---:|---|"]
    for r in rows:
        c = r.get("compressions_per_verify")
        if not c:
            continue
        tot, crit = c["total"], c["critical_path_32_lanes"]
        cp = " + ".join(f"{crit[h]:,.0f} {h}" for h in HASHES if crit[h])
        lines.append(f"| {r['scheme']} | {tot['sha256']:,.0f} | {tot['sha512']:,.0f} | {tot['keccak_f']:,.0f} | {cp} |")
    return lines
