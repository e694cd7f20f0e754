"""``scripts/agreement --scheme ed25519-cpu``: the CPU backend's own Ed25519 verify
(app/engine/backends/ed25519_cpu.cpp, built with its ZV_CHECK bounds checks) against libsodium
(pynacl, app.engine.reference.reference.verify_ed25519), in each of its builds
(:data:`app.engine.backends.ed25519_cpu.VARIANTS`: the one the CPU dispatches to and the
portable one).

Per chunk: the Ed25519 kernel suite's items (:func:`scripts.lib.agreement.ed25519.items`:
valid items under many keys, one-bit flips, every targeted mutation kind, mixed-order keys),
run through the chunk entry point the CPU backend calls; the first chunk of a set adds every
handed vector (Wycheproof's ed25519_test.json and the shipped known answers, wrong lengths
included).
"""

from __future__ import annotations

import random

from app.engine.backends import ed25519_cpu
from app.engine.reference import kat, reference
from app.vectors import convert_all, from_json
from scripts.lib.agreement import CheckFailures, Chunk, Tally, compare
from scripts.lib.agreement import ed25519 as kernel_suite

SCHEME = "ed25519-cpu"
TITLE = "Ed25519 CPU verify (own code) vs libsodium"
RESULTS = "ed25519_cpu_agreement"
KERNEL = "zv_ed25519_cpu_verify_chunk (app/engine/backends/ed25519_cpu.cpp, bounds checks on)"
REFERENCE, REFERENCE_SHORT = "libsodium (pynacl)", "libsodium"
VERSIONS = ("pynacl",)
SETS = list(ed25519_cpu.VARIANTS)
DEFAULTS = {"valid": 100_000, "mutated": 100_000}
CHUNK = kernel_suite.CHUNK
VALID_KINDS = ("valid",)
add_arguments = kernel_suite.add_arguments
extra_counts = kernel_suite.extra_counts


def prepare(args) -> None:
    for variant in args.sets:
        ed25519_cpu.load(variant)


def vectors() -> list:
    """Every handed Ed25519 vector: the shipped known answers and the converted external files."""
    return [ka.item for ka in kat.known_answers().get("ed25519", [])] + [
        from_json(r).item for r in convert_all() if r["scheme"] == "ed25519"]


def run_chunk(chunk: Chunk) -> Tally:
    rng = random.Random(f"ed25519-cpu-agreement/{chunk.seed}/{chunk.index}")
    groups = kernel_suite.items(chunk, rng)
    if chunk.index == 0:
        groups["vectors"] = vectors()
    own = ed25519_cpu.load(chunk.set_id)
    if own is None:
        raise RuntimeError(f"{chunk.set_id} does not build (see the log)")
    tally = Tally()
    with CheckFailures(tally, chunk.set_id, own.library):
        for kind, items in groups.items():
            compare(tally, chunk.set_id, kind, items,
                    lambda its: own.verify_many([(it.public_key, it.message, it.signature) for it in its]),
                    lambda its: [reference.verify_ed25519(it.public_key, it.message, it.signature) for it in its])
    return tally
