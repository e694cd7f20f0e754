"""``scripts/agreement --scheme bip340``: zv_verify_bip340 (host build, through
app.engine.device.ops on the host device, the kernel-host backend's path) against
libsecp256k1 (coincurve's cffi ``lib``, app.engine.reference.reference.verify_bip340).

Per chunk of CHUNK valid items, signed under one fresh key with libsecp256k1
(kat.bip340_sign) over messages of every length class (MESSAGE_LENGTHS: empty, one byte, the
BIP's 17 and 100, 32, up to 200 and a few of 1000–5000 bytes), as many mutated ones, one of
MUTATIONS each in turn (offset by the chunk, so every kind meets every message length).
tests/test_kernel_bip340.py runs :func:`run_chunk` on a small sample in CI.
"""

from __future__ import annotations

import random
from dataclasses import replace

from app.core.batch import Item
from app.engine.reference import kat, reference
from scripts.lib.agreement import CheckFailures, Chunk, Tally, compare, host_library, kernel_via_ops

SCHEME = "bip340"
TITLE = "BIP-340 kernel (host build) vs libsecp256k1 (coincurve)"
RESULTS = "bip340_agreement"
KERNEL = "zv_verify_bip340 (host build, through app.engine.device.ops)"
REFERENCE, REFERENCE_SHORT = "libsecp256k1 (coincurve: secp256k1_schnorrsig_verify)", "libsecp256k1"
VERSIONS = ("coincurve",)
SETS = ["bip340"]
DEFAULTS = {"valid": 100_000, "mutated": 100_000}
CHUNK = 500
VALID_KINDS = ("valid", "even-R")

# SEC 2 v2 §2.4.1.
P = 2**256 - 2**32 - 977
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141

#: Message lengths of the valid items, in turn (None: random 0–200 bytes).
MESSAGE_LENGTHS = [0, 1, 17, 32, 100, None, None, None, 55, 56, 63, 64, 65, 119, 120, 1000, None, None, None, 5000]
#: What a mutated item changes (each makes BIP-340 Verify fail, except where a bit flip in
#: the key lands on another valid x whose signature check then fails anyway).
MUTATIONS = ["bit-flip-pk", "bit-flip-sig", "bit-flip-msg", "r>=p", "r=p", "r-not-on-curve", "s>=n", "s=n",
             "s=0", "negated-s", "pk-x>=p", "pk-not-on-curve", "other-key", "other-message", "empty-message",
             "long-message", "odd-R"]


def _i2b(v: int) -> bytes:
    return v.to_bytes(32, "big")


def _non_residue_x(x: int) -> int:
    """The first x' ≥ x (mod p) with x'^3 + 7 not a square mod p: no point has that x."""
    while pow((x**3 + 7) % P, (P - 1) // 2, P) != P - 1:
        x = (x + 1) % P
    return x


def _flip(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    bit = rng.randrange(8 * len(out))
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def nonce_signature(secret: int, msg: bytes, rng: random.Random, odd: bool) -> tuple[bytes, bytes]:
    """(x-only key, signature) from the signing equation s = k + e·d with a random nonce k
    whose R = k·G has odd y (``odd``) or even y, taken as it is: BIP-340 Sign negates a nonce
    with odd y, so with ``odd`` x(R) = r holds but y(R) is odd and only Verify's parity check
    refuses it; without, the signature is valid (the control that the construction is right)."""
    import coincurve

    d = secret
    pub = coincurve.PrivateKey(_i2b(d)).public_key.format(compressed=True)
    if pub[0] == 3:  # P with odd y: BIP-340 signs with n − d so that the key is lift_x(x)
        d = N - d
    while True:
        k = rng.randrange(1, N)
        rpt = coincurve.PrivateKey(_i2b(k)).public_key.format(compressed=True)
        if rpt[0] == (3 if odd else 2):
            break
    r = rpt[1:]
    e = int.from_bytes(kat.tagged_hash("BIP0340/challenge", r + pub[1:] + msg), "big") % N
    return pub[1:], r + _i2b((k + e * d) % N)


def mutate(item: Item, kind: str, rng: random.Random, secret: int) -> Item:
    r, s = int.from_bytes(item.signature[:32], "big"), int.from_bytes(item.signature[32:], "big")
    pk, msg, sig = item.public_key, item.message, item.signature
    if kind == "bit-flip-pk":
        pk = _flip(pk, rng)
    elif kind == "bit-flip-sig":
        sig = _flip(sig, rng)
    elif kind == "bit-flip-msg":
        msg = _flip(msg, rng) if msg else b"\x00"
    elif kind == "r>=p":
        sig = _i2b(rng.randrange(P + 1, 2**256)) + sig[32:]
    elif kind == "r=p":
        sig = _i2b(P) + sig[32:]
    elif kind == "r-not-on-curve":
        sig = _i2b(_non_residue_x(r)) + sig[32:]
    elif kind == "s>=n":
        sig = sig[:32] + _i2b(s + N if s + N < 2**256 else rng.randrange(N + 1, 2**256))
    elif kind == "s=n":
        sig = sig[:32] + _i2b(N)
    elif kind == "s=0":
        sig = sig[:32] + _i2b(0)
    elif kind == "negated-s":  # R' = −s·G − e·P: neither R nor −R in general
        sig = sig[:32] + _i2b((N - s) % N)
    elif kind == "pk-x>=p":
        pk = _i2b(P + rng.randrange(2**256 - P))
    elif kind == "pk-not-on-curve":
        pk = _i2b(_non_residue_x(int.from_bytes(pk, "big")))
    elif kind == "other-key":
        pk = kat.bip340_sign(_i2b(rng.randrange(1, N)), b"", bytes(32))[0]
    elif kind == "other-message":
        msg = msg + b"\x00" if rng.random() < 0.5 else msg[:-1] if msg else b"\x01"
    elif kind == "empty-message":  # the signature of a non-empty message checked against b""
        msg = b"" if msg else b"\x00"
    elif kind == "long-message":
        msg = msg + rng.randbytes(rng.randrange(1, 3000))
    elif kind == "odd-R":
        pk, sig = nonce_signature(secret, msg, rng, odd=True)
    else:
        raise ValueError(kind)
    return replace(item, public_key=pk, message=msg, signature=sig)


def chunk_items(seed: int, chunk: int, n_valid: int, n_mutated: int) -> dict[str, list[Item]]:
    """Chunk ``chunk``'s items by kind: ``n_valid`` signed under one fresh key, then
    ``n_mutated`` mutations of them (kind i mod len(MUTATIONS), offset by the chunk), and
    beside each ``odd-R`` item an ``even-R`` one: the same construction with a nonce of even
    y, which must be valid (so the construction itself is checked)."""
    rng = random.Random(f"bip340-agreement/{seed}/{chunk}")
    secret = rng.randrange(1, N)
    valid = []
    for i in range(n_valid):
        size = MESSAGE_LENGTHS[(i + chunk) % len(MESSAGE_LENGTHS)]
        msg = rng.randbytes(rng.randrange(201) if size is None else size)
        pk, sig = kat.bip340_sign(_i2b(secret), msg, rng.randbytes(32))
        valid.append(Item(SCHEME, pk, msg, sig))
    groups: dict[str, list[Item]] = {"valid": valid}
    for i in range(n_mutated):
        kind = MUTATIONS[(i + chunk) % len(MUTATIONS)]
        base = valid[i % len(valid)]
        groups.setdefault(kind, []).append(mutate(base, kind, rng, secret))
        if kind == "odd-R":
            pk, sig = nonce_signature(secret, base.message, rng, odd=False)
            groups.setdefault("even-R", []).append(replace(base, public_key=pk, signature=sig))
    return groups


def prepare(args) -> None:
    host_library(SCHEME)


def _reference(items: list[Item]) -> list[bool]:
    return [reference.verify_bip340(it.public_key, it.message, it.signature) for it in items]


def run_chunk(chunk: Chunk) -> Tally:
    """Generate and check one chunk (see :func:`chunk_items`); every kind but the valid ones
    is expected false by the reference, which the tally counts (``reference_unexpected``)
    except for bit flips of the key (another valid x almost always, still a false verdict)."""
    groups = chunk_items(chunk.seed, chunk.index, chunk.counts["valid"], chunk.counts["mutated"])
    tally = Tally()
    with CheckFailures(tally, chunk.set_id, host_library(SCHEME)):  # the library the ops path runs
        for kind, items in groups.items():
            compare(tally, chunk.set_id, kind, items, lambda its: kernel_via_ops(SCHEME, its), _reference,
                    expect=kind in VALID_KINDS)
    return tally


def notes(rows: list[dict]) -> list[str]:
    return ["Every mutated kind is expected false by the reference and counted where it is not (`reference "
            "unexpected`); `odd-R` signatures satisfy the signing equation with a nonce whose R has odd y (BIP-340 "
            "Sign negates such a nonce), so only Verify's parity check refuses them; `even-R` are made the same way "
            "with a nonce of even y and must be valid.  Message lengths cycle through 0, 1, 17, 32, 55, 56, "
            "63–65, 100, 119, 120, 1000, 5000 bytes and random 0–200 (SHA-256 block boundaries of the challenge "
            "hash, which hashes 64 + 64 + |m| bytes)."]
