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

import hashlib
import random
from dataclasses import dataclass

from app.core.batch import OPT_LOW_S, OPT_PREHASHED
from app.engine.reference import kat, reference
from scripts.lib.agreement import (
    CheckFailures,
    Chunk,
    Tally,
    compare,
    hexed,
    host_library,
    kernel_by_lengths,
    kernel_by_options,
)
from scripts.lib.agreement.ecdsa import RS_KINDS, out_of_range

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

#: (key encoding, prehashed) of each chunk's valid items, in turn.
VARIANTS = [("compressed", False), ("uncompressed", False), ("compressed", True), ("uncompressed", True)]
MUTATIONS = ["bit-flip", "high-s", "high-s-low_s", "low-s-low_s", "r=0", "s=0", "r>=n", "s>=n", "r=n", "s=n",
             "off-curve-key", "x>=p-key", "y>=p-key", "bad-prefix", "hybrid-key", "other-message", "prehash-length",
             "other-key"]


@dataclass(frozen=True)
class Case:
    kind: str
    pk: bytes
    msg: bytes
    sig: bytes
    prehashed: bool
    low_s: bool


def kernel_verify(items: list[tuple[bytes, bytes, bytes]], *, prehashed: bool = False,
                  low_s: bool = False) -> list[bool]:
    """Verdicts of zv_verify_p256 (host build) for (pk, msg, sig) items."""
    return kernel_by_lengths(SCHEME, items, (OPT_PREHASHED if prehashed else 0) | (OPT_LOW_S if low_s else 0))


# ------------------------------------------------------------------ generation
def _i2b(v: int) -> bytes:
    return v.to_bytes(32, "big")


def uncompressed(pk: bytes) -> bytes:
    """The 65-byte SEC 1 form of a valid key in either form (OpenSSL decodes it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), pk)
    return key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


def _non_residue_x(x: int) -> int:
    """The first x' ≥ x (mod p) with x'^3 − 3x' + b not a square: a 33-byte key with no point."""
    while pow((x**3 - 3 * x + B) % P, (P - 1) // 2, P) != P - 1:
        x = (x + 1) % P
    return x


def mutate(c: Case, kind: str, rng: random.Random, other_pk: bytes) -> Case:
    """``c`` (a valid case) changed as ``kind`` (one of MUTATIONS) says; ``other_pk`` is a
    valid key of another chunk's signer."""
    r, s = int.from_bytes(c.sig[:32], "big"), int.from_bytes(c.sig[32:], "big")
    pk, msg, sig, pre, low = c.pk, c.msg, c.sig, c.prehashed, False
    if kind == "bit-flip":
        it = kat.mutate(kat.Item(SCHEME, pk, msg, sig, prehashed=pre), rng)
        pk, msg, sig = it.public_key, it.message, it.signature
    elif kind in ("high-s", "high-s-low_s"):  # valid by default, false under low_s
        sig = _i2b(r) + _i2b(s if s > N // 2 else N - s)
        low = kind == "high-s-low_s"
    elif kind == "low-s-low_s":  # valid under low_s too
        sig = _i2b(r) + _i2b(s if s <= N // 2 else N - s)
        low = True
    elif kind in RS_KINDS:
        sig = out_of_range(kind, r, s, N, rng)
    elif kind == "off-curve-key":
        if len(pk) == 65:
            y = (int.from_bytes(pk[33:], "big") + rng.choice([-2, -1, 1, 2])) % P
            pk = pk[:33] + _i2b(y)
        else:
            pk = pk[:1] + _i2b(_non_residue_x(int.from_bytes(pk[1:], "big")))
    elif kind == "x>=p-key":
        pk = pk[:1] + _i2b(P + rng.randrange(2**256 - P)) + pk[33:]
    elif kind == "y>=p-key":  # y + p where that fits, the same point's y read mod p
        full = uncompressed(pk)
        y = int.from_bytes(full[33:], "big")
        pk = full[:33] + _i2b(y + P if y + P < 2**256 else P + rng.randrange(2**256 - P))
    elif kind == "bad-prefix":
        valid = {0x02, 0x03} if len(pk) == 33 else {0x04}
        pk = bytes([rng.choice([b for b in range(256) if b not in valid])]) + pk[1:]
    elif kind == "hybrid-key":  # SEC 1's hybrid form with the right parity: refused (as cryptography does)
        full = uncompressed(pk)
        pk = bytes([6 | (full[-1] & 1)]) + full[1:]
    elif kind == "other-message":
        msg = bytes([msg[0] ^ 0x80]) + msg[1:] if msg else b"\x00"
    elif kind == "prehash-length":
        digest = msg if pre else hashlib.sha256(msg).digest()
        msg = digest[: rng.choice([0, 31])] if rng.random() < 0.5 else digest + b"\x00"
        pre = True
    elif kind == "other-key":
        pk = other_pk if len(other_pk) == len(pk) else uncompressed(other_pk)
    else:
        raise ValueError(kind)
    return Case(kind, pk, msg, sig, pre, low)


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
        sig = _i2b(r) + _i2b(min(s, N - s)) if low else it.signature
        valid.append(Case("valid", it.public_key, it.message, sig, prehashed, low))
    mutated = []
    for i in range(n_mutated):
        kind = MUTATIONS[(i + chunk) % len(MUTATIONS)]
        mutated.append(mutate(valid[i % len(valid)], kind, rng, other))
    return valid + mutated


def prepare(args) -> None:
    host_library(SCHEME)


def _kernel(cases: list[Case]) -> list[bool]:
    """Kernel verdicts of cases with any options: one call per (prehashed, low_s)."""
    return kernel_by_options(SCHEME, cases, ("prehashed", "low_s"))


def _reference(cases: list[Case]) -> list[bool]:
    return [reference.verify_p256(c.pk, c.msg, c.sig, prehashed=c.prehashed, low_s=c.low_s) for c in cases]


def _describe(c: Case) -> dict:
    return {"pk": c.pk.hex(), "msg": hexed(c.msg), "sig": c.sig.hex(), "prehashed": c.prehashed, "low_s": c.low_s}


def run_chunk(chunk: Chunk) -> Tally:
    """Generate and check one chunk (see :func:`chunk_cases`)."""
    cases = chunk_cases(chunk.seed, chunk.index, chunk.counts["valid"], chunk.counts["mutated"])
    by_kind: dict[str, list[Case]] = {}
    for c in cases:
        by_kind.setdefault(c.kind, []).append(c)
    tally = Tally()
    with CheckFailures(tally, chunk.set_id, host_library(SCHEME)):
        for kind, group in by_kind.items():
            compare(tally, chunk.set_id, kind, group, _kernel, _reference, describe=_describe)
            for c in group:
                tally.count(chunk.set_id, kind, **{f"pk{len(c.pk)}": 1, "prehashed": int(c.prehashed),
                                                   "low_s": int(c.low_s)})
    return tally


def notes(rows: list[dict]) -> list[str]:
    return ["High-S signatures are valid for P-256 unless the batch sets `low_s`: `high-s` items (s made high) "
            "are accepted, `high-s-low_s` refused, `low-s-low_s` accepted; one valid item in five runs under "
            "`low_s` with s made low.  `hybrid-key` items use SEC 1's 0x06/0x07 form with the right parity, "
            "which cryptography refuses.  A bit flip can leave an item valid only by chance; the reference decides."]
