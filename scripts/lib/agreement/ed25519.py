"""``scripts/agreement --scheme ed25519``: zv_verify_ed25519 (host build, through
app.engine.device.ops on the host device, the kernel-host backend's path) against libsodium
(pynacl, app.engine.reference.reference.verify_ed25519).

Per chunk of CHUNK valid items (kat.generate: many keys, random 0-200 byte messages): as many
mutated ones, 40 % one-bit flips of pk, msg or sig and the rest spread evenly over the
targeted kinds of tests/oracles/ed25519_model.MUTANT_KINDS (S >= L, small-order A and R,
non-canonical and off-curve encodings), plus ``--mixed`` mixed-order keys in all
(A = [a]B + T, about half of which libsodium accepts).
"""

from __future__ import annotations

import random

from app.engine.reference import kat, reference
from scripts.lib.agreement import CheckFailures, Chunk, Tally, compare, host_library, kernel_via_ops
from tests.oracles import ed25519_model as m

SCHEME = "ed25519"
TITLE = "Ed25519 kernel (host build) vs libsodium"
RESULTS = "ed25519_agreement"
KERNEL = "zv_verify_ed25519 (host build, through app.engine.device.ops)"
REFERENCE, REFERENCE_SHORT = "libsodium (pynacl)", "libsodium"
VERSIONS = ("pynacl",)
SETS = ["ed25519"]
DEFAULTS = {"valid": 100_000, "mutated": 100_000}
CHUNK = 1000
VALID_KINDS = ("valid",)


def add_arguments(ap) -> None:
    ap.add_argument("--mixed", type=int, default=10_000, help="mixed-order keys A = [a]B + T, in all")


def extra_counts(args) -> dict[str, int]:
    return {"mixed": args.mixed}


def prepare(args) -> None:
    host_library(SCHEME)


def items(chunk: Chunk, rng: random.Random) -> dict[str, list]:
    """A chunk's items by kind: ``valid``, ``mixed_order`` and each mutation kind (see above)."""
    valid = [ka.item for ka in kat.generate(SCHEME, chunk.counts["valid"], 0, seed=10_000 * chunk.seed + chunk.index)]
    groups: dict[str, list] = {"valid": valid, "mixed_order": m.mixed_order_items(rng, chunk.counts["mixed"])}
    n_mutated = chunk.counts["mutated"]
    n_flip = n_mutated * 2 // 5
    kinds = m.MUTANT_KINDS  # kinds[0] is the plain bit flip
    for j in range(n_mutated):
        kind = "bitflip" if j < n_flip else kinds[1 + (j - n_flip) % (len(kinds) - 1)]
        groups.setdefault(kind, []).append(m.mutant(valid[j % len(valid)], kind, rng))
    return groups


def run_chunk(chunk: Chunk) -> Tally:
    rng = random.Random(f"ed25519-agreement/{chunk.seed}/{chunk.index}")
    groups = items(chunk, rng)
    tally = Tally()
    with CheckFailures(tally, chunk.set_id, host_library(SCHEME)):  # the library the ops path runs
        for kind, its in groups.items():
            compare(tally, chunk.set_id, kind, its, lambda x: kernel_via_ops(SCHEME, x),
                    lambda x: [reference.verify_ed25519(it.public_key, it.message, it.signature) for it in x])
    return tally
