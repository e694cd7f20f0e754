"""``scripts/agreement --scheme p256``: zv_verify_p256 (host build, called through ctypes one
launch per key and signature length, so malformed lengths reach the kernel too) against
OpenSSL through ``cryptography`` (app.engine.reference.reference.verify_p256).

Valid items are signed with OpenSSL (app.engine.reference.kat, RFC 6979 nonces) in chunks of
CHUNK under a fresh key each, covering compressed and uncompressed keys, hashed and
prehashed messages (VARIANTS), s as OpenSSL makes it (high half of the time: valid by
default), and one item in five under ``low_s`` with s made low; as many mutated items are
derived from them, one of MUTATIONS each in turn (offset by the chunk, so every kind meets
every variant).  tests/test_kernel_p256.py runs :func:`run_chunk` on a small sample.
"""

from __future__ import annotations

import random

from app.core.batch import OPT_LOW_S, OPT_PREHASHED
from app.engine.reference import kat, reference
from scripts.lib.agreement import Chunk, Tally, ecdsa, host_library, kernel_by_lengths
from scripts.lib.agreement.ecdsa import Case, i2b

SCHEME = "p256"
TITLE = "P-256 ECDSA kernel (host build) vs OpenSSL (cryptography)"
RESULTS = "p256_agreement"
KERNEL = "zv_verify_p256 (host build, called per key and signature length)"
REFERENCE, REFERENCE_SHORT = "OpenSSL (cryptography)", "OpenSSL"
VERSIONS = ("cryptography",)
SETS = ["p256"]
DEFAULTS = {"valid": 100_000, "mutated": 100_000}
CHUNK = 250
VALID_KINDS = ("valid",)
#: Per-kind columns beyond the common ones: the key encodings, prehashed and low_s items counted.
COLUMNS = (("33-byte keys", lambda k: f"{k.get('pk33', 0):,}"), ("65-byte keys", lambda k: f"{k.get('pk65', 0):,}"),
           ("prehashed", lambda k: f"{k.get('prehashed', 0):,}"), ("low_s", lambda k: f"{k.get('low_s', 0):,}"))

# FIPS 186-5 / SP 800-186 §3.2.1.3.
P = 2**256 - 2**224 + 2**192 + 2**96 - 1
N = reference.P256_N
B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
CURVE = ecdsa.Curve(SCHEME, P, N, -3, B, "low_s", {33: frozenset({0x02, 0x03}), 65: frozenset({0x04})},
                    reference.verify_p256, ("prehashed", "low_s"))

#: (key encoding, prehashed) of each chunk's valid items, in turn.
VARIANTS = [("compressed", False), ("uncompressed", False), ("compressed", True), ("uncompressed", True)]
MUTATIONS = ["bit-flip", "high-s", "high-s-low_s", "low-s-low_s", "r=0", "s=0", "r>=n", "s>=n", "r=n", "s=n",
             "off-curve-key", "x>=p-key", "y>=p-key", "bad-prefix", "hybrid-key", "other-message", "prehash-length",
             "other-key"]


def kernel_verify(items: list[tuple[bytes, bytes, bytes]], *, prehashed: bool = False,
                  low_s: bool = False) -> list[bool]:
    """Verdicts of zv_verify_p256 (host build) for (pk, msg, sig) items."""
    return kernel_by_lengths(SCHEME, items, (OPT_PREHASHED if prehashed else 0) | (OPT_LOW_S if low_s else 0))


# ------------------------------------------------------------------ generation
def uncompressed(pk: bytes) -> bytes:
    """The 65-byte SEC 1 form of a valid key in either form (OpenSSL decodes it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), pk)
    return key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


def mutate(c: Case, kind: str, rng: random.Random, other_pk: bytes) -> Case:
    """``c`` (a valid case) changed as ``kind`` (one of MUTATIONS) says; ``other_pk`` is a
    valid key of another chunk's signer.  The kinds of every curve are :func:`ecdsa.mutate`'s."""
    r, s = int.from_bytes(c.sig[:32], "big"), int.from_bytes(c.sig[32:], "big")
    pk, msg, sig, pre, low = c.pk, c.msg, c.sig, c.prehashed, False
    if kind in ("high-s", "high-s-low_s"):  # valid by default, false under low_s
        sig = i2b(r) + i2b(s if s > N // 2 else N - s)
        low = kind == "high-s-low_s"
    elif kind == "low-s-low_s":  # valid under low_s too
        sig = i2b(r) + i2b(s if s <= N // 2 else N - s)
        low = True
    elif kind == "y>=p-key":  # y + p where that fits, the same point's y read mod p
        full = uncompressed(pk)
        y = int.from_bytes(full[33:], "big")
        pk = full[:33] + i2b(y + P if y + P < 2**256 else P + rng.randrange(2**256 - P))
    elif kind == "hybrid-key":  # SEC 1's hybrid form with the right parity: refused (as cryptography does)
        full = uncompressed(pk)
        pk = bytes([6 | (full[-1] & 1)]) + full[1:]
    elif kind == "other-key":
        pk = other_pk if len(other_pk) == len(pk) else uncompressed(other_pk)
    else:
        return ecdsa.mutate(CURVE, c, kind, rng)
    return Case(kind, pk, msg, sig, pre, low_s=low)


def chunk_cases(seed: int, chunk: int, n_valid: int, n_mutated: int) -> list[Case]:
    """Chunk ``chunk``'s items: ``n_valid`` signed under one fresh key, then ``n_mutated``
    mutations of them (kind i mod len(MUTATIONS), offset by the chunk so every kind meets
    every variant)."""
    encoding, prehashed = VARIANTS[chunk % len(VARIANTS)]
    compressed = encoding == "compressed"
    signed = kat.sign_items(SCHEME, n_valid, seed=seed * 1_000_003 + chunk, compressed=compressed,
                            prehashed=prehashed)
    other = kat.sign_items(SCHEME, 1, seed=seed * 1_000_003 + chunk + 500_000, compressed=compressed)[0].public_key
    rng = random.Random(f"p256-agreement/{seed}/{chunk}")
    valid = []
    for i, it in enumerate(signed):
        low = i % 5 == 0
        r, s = int.from_bytes(it.signature[:32], "big"), int.from_bytes(it.signature[32:], "big")
        sig = i2b(r) + i2b(min(s, N - s)) if low else it.signature
        valid.append(Case("valid", it.public_key, it.message, sig, prehashed, low_s=low))
    mutated = []
    for i in range(n_mutated):
        kind = MUTATIONS[(i + chunk) % len(MUTATIONS)]
        mutated.append(mutate(valid[i % len(valid)], kind, rng, other))
    return valid + mutated


def prepare(args) -> None:
    host_library(SCHEME)


def run_chunk(chunk: Chunk) -> Tally:
    """Generate and check one chunk (see :func:`chunk_cases`)."""
    return ecdsa.run_chunk(CURVE, chunk_cases(chunk.seed, chunk.index, chunk.counts["valid"], chunk.counts["mutated"]),
                           chunk)


def notes(rows: list[dict]) -> list[str]:
    return ["High-S signatures are valid for P-256 unless the batch sets `low_s`: `high-s` items (s made high) "
            "are accepted, `high-s-low_s` refused, `low-s-low_s` accepted; one valid item in five runs under "
            "`low_s` with s made low.  `hybrid-key` items use SEC 1's 0x06/0x07 form with the right parity, "
            "which cryptography refuses.  A bit flip can leave an item valid only by chance; the reference decides."]
