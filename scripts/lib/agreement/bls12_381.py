"""``scripts/agreement --scheme bls12-381``: zv_verify_bls12_381 (host build, through
app.engine.device.ops on the host device, the kernel-host backend's path) against arkworks
(app.engine.reference.reference.verify_bls12_381).

Valid items: CoreSign of the POP ciphersuite (kat.sign_items: random keys, random 0-200
byte messages), chunks of CHUNK.  Mutated ones, every kind of MUTANT_KINDS in turn: one-bit
flips, a wrong message, a wrong key, the signature of another message, the identity as key
and as signature, and public keys and signatures replaced by encodings that must not decode
(bad flags, x >= p, off the curve, on the curve but outside G1/G2: bls12_381_arith's
make_encoding) or that decode to another point (sign bit flipped).  tests/test_kernel_bls12_381.py
runs :func:`mutant`, :func:`kernel_verdicts` and :func:`reference_verdicts` on a CI sample.

``--path blst`` compares the CPU backend's blst loop instead (app/engine/backends/native_bls.py,
one CoreVerify per item: :func:`blst_verdicts`), into bls_blst_agreement.{json,md}; the RLC
and aggregate suites take the same option.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

from app.core.batch import Item
from app.core.schemes import SCHEMES
from app.engine.backends import native_bls
from app.engine.device import hostlib, ops, registry
from app.engine.reference import kat, reference
from scripts.lib.agreement import CheckFailures, Chunk, Tally, by_lengths, compare, host_library
from scripts.lib.agreement import bls12_381_arith as encodings

SCHEME = "bls12-381"
TITLE = "BLS12-381 verify kernel (host build) vs arkworks"
RESULTS = "bls_agreement"
KERNEL = "zv_verify_bls12_381 (host build, through app.engine.device.ops)"
REFERENCE, REFERENCE_SHORT = "arkworks (py_arkworks_bls12381)", "arkworks"
VERSIONS = ("py_arkworks_bls12381",)
SETS = ["bls12-381"]
#: Per ``--path``: (TITLE, RESULTS, KERNEL).
RUNS = {
    "kernel": (TITLE, RESULTS, KERNEL),
    "blst": ("BLS12-381 on blst (the CPU backend's loop) vs arkworks", "bls_blst_agreement",
             "zv_bls_verify on blst, one CoreVerify per item (app/engine/backends/native_bls.py)"),
}
OPTIONS = ("path",)
DEFAULTS = {"valid": 20_000, "mutated": 20_000}
CHUNK = 25
VALID_KINDS = ("valid",)

#: Encoding kinds of make_encoding used to replace a key or a signature (all but "valid").
ENCODING_KINDS = [k for k in encodings.KINDS if k != "valid"]
MUTANT_KINDS = (["bitflip", "wrong_message", "wrong_key", "other_message_sig", "identity_pk",
                 "identity_sig", "identity_both"]
                + [f"pk_{k}" for k in ENCODING_KINDS if k != "x_c0_ge_p"]  # x has one coordinate in G1
                + [f"sig_{k}" for k in ENCODING_KINDS])


def mutant(it: Item, kind: str, other: Item, rng: random.Random) -> Item:
    """One mutation of the valid item ``it``; ``other`` is a valid item under another key
    with another message (the source of wrong keys and foreign signatures)."""
    if kind == "bitflip":
        return kat.mutate(it, rng)
    if kind == "wrong_message":
        return replace(it, message=it.message + b"\x00" if rng.random() < 0.5 else other.message)
    if kind == "wrong_key":
        return replace(it, public_key=other.public_key)
    if kind == "other_message_sig":
        return replace(it, signature=other.signature)
    if kind.startswith("identity"):
        pk = encodings.compress(1, None) if kind in ("identity_pk", "identity_both") else it.public_key
        sig = encodings.compress(2, None) if kind in ("identity_sig", "identity_both") else it.signature
        return replace(it, public_key=pk, signature=sig)
    if kind.startswith("pk_"):
        return replace(it, public_key=encodings.make_encoding(rng, 1, kind[3:]))
    if kind.startswith("sig_"):
        return replace(it, signature=encodings.make_encoding(rng, 2, kind[4:]))
    raise ValueError(kind)


def kernel_verdicts(items: list[Item]) -> list[bool]:
    """zv_verify_bls12_381's verdicts through app.engine.device.ops on the host device, one
    launch per (pk length, sig length) group: lengths the Batch type refuses (a truncated
    signature) still reach the kernel, which must answer 0 for them."""
    scheme = SCHEMES[SCHEME]
    dev, kernel = hostlib.device(), registry.VERIFY_KERNELS[SCHEME]
    out: list[bool] = [False] * len(items)
    for (pk_len, sig_len), idx in by_lengths((it.public_key, it.signature) for it in items).items():
        msgs, offsets = ops.pack_messages([items[i].message for i in idx])
        db = ops.DeviceBatch(
            n=len(idx), code=scheme.code,
            pks=dev.put(np.frombuffer(b"".join(items[i].public_key for i in idx) + b"\0", np.uint8)), pk_len=pk_len,
            sigs=dev.put(np.frombuffer(b"".join(items[i].signature for i in idx) + b"\0", np.uint8)), sig_len=sig_len,
            msgs=dev.put(msgs), offsets=dev.put(offsets), ctx=dev.put(np.zeros(1, np.uint8)), ctx_len=0, options=0)
        verdicts = dev.get(ops.verify(dev, kernel, db), len(idx))
        if not set(verdicts.tolist()) <= {0, 1}:
            raise RuntimeError(f"a verdict byte other than 0 or 1: {sorted(set(verdicts.tolist()))}")
        for j, i in enumerate(idx):
            out[i] = bool(verdicts[j])
    return out


def add_arguments(ap) -> None:
    ap.add_argument("--path", choices=("kernel", "blst"), default="kernel",
                    help="what is compared with arkworks: the kernel's host build, or the CPU backend's blst loop")


def configure(args) -> None:
    global TITLE, RESULTS, KERNEL
    TITLE, RESULTS, KERNEL = RUNS[args.path]


def blst_verdicts(items: list[Item], rlc: bool = False) -> list[bool]:
    """Verdicts of the CPU backend's blst loop (native_bls.BlsLoops.verify), one chunk per
    (key length, signature length) as a columnar batch holds one of each, in item order."""
    loops = native_bls.loops()
    if loops is None:
        raise RuntimeError("the blst loops did not load (no compiler or no blspy)")
    out: list[bool] = [False] * len(items)
    for (pk_len, sig_len), idx in by_lengths((it.public_key, it.signature) for it in items).items():
        msgs, offsets = ops.pack_messages([items[i].message for i in idx])
        pks = np.frombuffer(b"".join(items[i].public_key for i in idx), np.uint8).reshape(len(idx), pk_len)
        sigs = np.frombuffer(b"".join(items[i].signature for i in idx), np.uint8).reshape(len(idx), sig_len)
        for j, v in zip(idx, loops.verify(pks, sigs, msgs, offsets[:len(idx) + 1], rlc=rlc)):
            out[j] = bool(v)
    return out


def reference_verdicts(items: list[Item]) -> list[bool]:
    return [reference.verify_bls12_381(it.public_key, it.message, it.signature) for it in items]


def prepare(args) -> None:
    if getattr(args, "path", "kernel") == "blst":
        native_bls.loops()  # built once, before the workers fork
    else:
        host_library(SCHEME)


def chunk_items(chunk: Chunk, tag: str, seed_step: int) -> tuple[dict[str, list[Item]], random.Random]:
    """A chunk's valid items and its mutants, by kind (every kind of :data:`MUTANT_KINDS` in
    turn), seeded by ``tag`` and ``seed_step``; and the chunk's random generator."""
    rng = random.Random(f"{tag}/{chunk.seed}/{chunk.index}")
    n_valid = chunk.counts["valid"]
    valid = kat.sign_items(SCHEME, n_valid, seed=seed_step * chunk.seed + chunk.index)
    others = kat.sign_items(SCHEME, max(1, n_valid), seed=seed_step * chunk.seed + seed_step + chunk.index)
    groups: dict[str, list[Item]] = {"valid": valid}
    for j in range(chunk.counts["mutated"]):
        kind = MUTANT_KINDS[(chunk.index * 7 + j) % len(MUTANT_KINDS)]
        k = j % len(valid)
        groups.setdefault(kind, []).append(mutant(valid[k], kind, others[k % len(others)], rng))
    return groups, rng


def run_chunk(chunk: Chunk) -> Tally:
    groups, _ = chunk_items(chunk, "bls-agreement", 20_000)
    tally = Tally()
    if chunk.options.get("path") == "blst":
        for kind, items in groups.items():
            compare(tally, chunk.set_id, kind, items, blst_verdicts, reference_verdicts)
        return tally
    with CheckFailures(tally, chunk.set_id, host_library(SCHEME)):  # the library the ops path runs
        for kind, items in groups.items():
            compare(tally, chunk.set_id, kind, items, kernel_verdicts, reference_verdicts)
    return tally
