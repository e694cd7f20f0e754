"""``scripts/agreement --scheme secp256k1``: zv_verify_secp256k1 (host build, called through
ctypes one launch per key and signature length, so malformed lengths reach the kernel too)
against libsecp256k1 (coincurve, app.engine.reference.reference.verify_secp256k1).

Valid items are signed with coincurve in chunks of CHUNK under a fresh key each, covering
compressed, uncompressed and hybrid keys, hashed and prehashed messages, with and without
allow_high_s (VARIANTS); as many mutated items are derived from them, one of MUTATIONS each
in turn (offset by the chunk, so every kind meets every variant).  tests/test_kernel_secp256k1.py
runs :func:`run_chunk` on a small sample in CI and calls the kernel through :func:`kernel_verify`.
"""

from __future__ import annotations

import random

from app.core.batch import OPT_ALLOW_HIGH_S, OPT_PREHASHED
from app.engine.reference import kat, reference
from scripts.lib.agreement import Chunk, Tally, ecdsa, host_library, kernel_by_lengths
from scripts.lib.agreement.ecdsa import Case, i2b

SCHEME = "secp256k1"
TITLE = "secp256k1 kernel (host build) vs libsecp256k1 (coincurve)"
RESULTS = "secp256k1_agreement"
KERNEL = "zv_verify_secp256k1 (host build, called per key and signature length)"
REFERENCE, REFERENCE_SHORT = "libsecp256k1 (coincurve)", "libsecp256k1"
VERSIONS = ("coincurve",)
SETS = ["secp256k1"]
DEFAULTS = {"valid": 100_000, "mutated": 100_000}
CHUNK = 250
VALID_KINDS = ("valid",)
#: Per-kind columns beyond the common ones: the key encodings and prehashed items counted.
COLUMNS = (("33-byte keys", lambda k: f"{k.get('pk33', 0):,}"), ("65-byte keys", lambda k: f"{k.get('pk65', 0):,}"),
           ("prehashed", lambda k: f"{k.get('prehashed', 0):,}"))

# SEC 2 v2 §2.4.1.
P = 2**256 - 2**32 - 977
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
CURVE = ecdsa.Curve(SCHEME, P, N, 0, 7, "allow_high_s",
                    {33: frozenset({0x02, 0x03}), 65: frozenset({0x04, 0x06, 0x07})},
                    reference.verify_secp256k1, ("prehashed",))

#: (key encoding, prehashed) of each chunk's valid items, in turn.
VARIANTS = [("compressed", False), ("uncompressed", False), ("hybrid", False),
            ("compressed", True), ("uncompressed", True), ("hybrid", True)]
MUTATIONS = ["bit-flip", "high-s", "high-s-allowed", "r=0", "s=0", "r>=n", "s>=n", "r=n", "s=n",
             "off-curve-key", "x>=p-key", "bad-prefix", "hybrid-wrong-parity", "other-message",
             "prehash-length"]


# ------------------------------------------------------------------ the kernel, host build
def kernel_verify(items: list[tuple[bytes, bytes, bytes]], *, prehashed: bool = False,
                  allow_high_s: bool = False) -> list[bool]:
    """Verdicts of zv_verify_secp256k1 (host build) for (pk, msg, sig) items; one call per
    (pk length, sig length), so malformed lengths go through the kernel too."""
    options = (OPT_PREHASHED if prehashed else 0) | (OPT_ALLOW_HIGH_S if allow_high_s else 0)
    return kernel_by_lengths(SCHEME, items, options)


# ------------------------------------------------------------------ generation
def _y_of(pk65: bytes) -> int:
    return int.from_bytes(pk65[33:], "big")


def _uncompressed(pk: bytes) -> bytes:
    import coincurve

    return coincurve.PublicKey(pk).format(compressed=False)


def _encode(pk33: bytes, encoding: str) -> bytes:
    if encoding == "compressed":
        return pk33
    full = _uncompressed(pk33)
    if encoding == "uncompressed":
        return full
    return bytes([6 | (_y_of(full) & 1)]) + full[1:]


def mutate(c: Case, kind: str, rng: random.Random) -> Case:
    """``c`` (a valid case) changed as ``kind`` (one of MUTATIONS) says.  The kinds of every
    curve are :func:`ecdsa.mutate`'s."""
    r, s = int.from_bytes(c.sig[:32], "big"), int.from_bytes(c.sig[32:], "big")
    if kind in ("high-s", "high-s-allowed"):
        return Case(kind, c.pk, c.msg, i2b(r) + i2b(N - s), c.prehashed, allow_high_s=kind == "high-s-allowed")
    if kind == "hybrid-wrong-parity":
        full = c.pk if len(c.pk) == 65 else _uncompressed(c.pk)
        return Case(kind, bytes([7 - (_y_of(full) & 1)]) + full[1:], c.msg, c.sig, c.prehashed)
    return ecdsa.mutate(CURVE, c, kind, rng)


def chunk_cases(seed: int, chunk: int, n_valid: int, n_mutated: int) -> list[Case]:
    """Chunk ``chunk``'s items: ``n_valid`` signed under one fresh key, then ``n_mutated``
    mutations of them (kind i mod len(MUTATIONS), offset by the chunk so every kind meets
    every variant)."""
    encoding, prehashed = VARIANTS[chunk % len(VARIANTS)]
    signed = kat.sign_items("secp256k1", n_valid, seed=seed * 1_000_003 + chunk, compressed=True,
                            prehashed=prehashed)
    rng = random.Random(f"secp256k1-agreement/{seed}/{chunk}")
    pk = _encode(signed[0].public_key, encoding) if signed else b""
    valid = [Case("valid", pk, it.message, it.signature, prehashed, allow_high_s=(i % 5 == 0))
             for i, it in enumerate(signed)]
    mutated = []
    for i in range(n_mutated):
        kind = MUTATIONS[(i + chunk) % len(MUTATIONS)]
        mutated.append(mutate(valid[i % len(valid)], kind, rng))
    return valid + mutated


def prepare(args) -> None:
    host_library(SCHEME)


def run_chunk(chunk: Chunk) -> Tally:
    """Generate and check one chunk (see :func:`chunk_cases`)."""
    return ecdsa.run_chunk(CURVE, chunk_cases(chunk.seed, chunk.index, chunk.counts["valid"], chunk.counts["mutated"]),
                           chunk)


def notes(rows: list[dict]) -> list[str]:
    return ["`high-s-allowed` items run with allow_high_s, so libsecp256k1 accepts them after normalising; one "
            "valid item in five runs with allow_high_s as well.  A bit flip can leave an item valid (a key prefix "
            "0x04 <-> 0x06 names the same key when y is even); the reference decides."]
