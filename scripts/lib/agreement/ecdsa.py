"""What the ECDSA agreement suites (secp256k1, p256) share; only the curve differs.

A suite names its :class:`Curve` (field prime, order, equation, the per-item option besides
``prehashed``, the key prefixes SEC 1 allows it, the reference) and the mutations of its own
(high-S rules, hybrid keys); the rest is here, once: the item record, the mutations of the
signature's range (SEC 1 v2 §4.1.4 step 1, FIPS 186-5 §6.4.2 step 1: r, s ∈ [1, n − 1]), of the
key's encoding and of the message, and one chunk's run through the kernel and the reference.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from app.engine.reference import kat
from scripts.lib.agreement import CheckFailures, Chunk, Tally, compare, hexed, host_library, kernel_by_options

#: The mutation kinds :func:`out_of_range` makes.
RS_KINDS = ("r=0", "s=0", "r>=n", "s>=n", "r=n", "s=n")
#: The mutation kinds :func:`mutate` makes for every curve.
SHARED_KINDS = ("bit-flip", *RS_KINDS, "off-curve-key", "x>=p-key", "bad-prefix", "other-message", "prehash-length")


@dataclass(frozen=True)
class Case:
    """One item: its kind (``valid`` or a mutation), key, message, signature and options (a
    curve uses one of ``low_s`` and ``allow_high_s``; the other stays False)."""

    kind: str
    pk: bytes
    msg: bytes
    sig: bytes
    prehashed: bool
    low_s: bool = False
    allow_high_s: bool = False


@dataclass(frozen=True)
class Curve:
    """A short-Weierstrass curve y² = x³ + a·x + b over F_p of prime order n, as its suite
    checks it.

    Attributes:
        option: the per-item option besides ``prehashed`` (``low_s`` or ``allow_high_s``).
        prefixes: key length → the first bytes a valid key of that length may start with.
        reference: ``reference(pk, msg, sig, prehashed=..., <option>=...) -> bool``.
        counted: the ``bool`` options counted per kind (beyond the key length).
    """

    scheme: str
    p: int
    n: int
    a: int
    b: int
    option: str
    prefixes: dict[int, frozenset[int]]
    reference: Callable[..., bool]
    counted: tuple[str, ...]

    def non_residue_x(self, x: int) -> int:
        """The first x' ≥ x (mod p) with x'^3 + a·x' + b not a square: a 33-byte key with no point."""
        p = self.p
        while pow((x**3 + self.a * x + self.b) % p, (p - 1) // 2, p) != p - 1:
            x = (x + 1) % p
        return x


def i2b(v: int) -> bytes:
    return v.to_bytes(32, "big")


def above(v: int, n: int, rng: random.Random) -> int:
    """A value ≥ n: v + n when it fits in 256 bits, else random in [n, 2^256)."""
    return v + n if v + n < 2**256 else rng.randrange(n, 2**256)


def out_of_range(kind: str, r: int, s: int, n: int, rng: random.Random) -> bytes:
    """The 64-byte r ‖ s of mutation ``kind`` (one of :data:`RS_KINDS`) from a valid signature's
    r and s, for a curve of order ``n``; raises ``ValueError`` for another kind."""
    if kind == "r=0":
        r = 0
    elif kind == "s=0":
        s = 0
    elif kind == "r>=n":
        r = above(r, n, rng)
    elif kind == "s>=n":
        s = above(s, n, rng)
    elif kind == "r=n":
        r = n
    elif kind == "s=n":
        s = n
    else:
        raise ValueError(f"not an r/s range mutation: {kind!r}")
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def mutate(curve: Curve, c: Case, kind: str, rng: random.Random) -> Case:
    """``c`` (a valid case) changed as ``kind`` (one of :data:`SHARED_KINDS`) says, its options
    cleared but ``prehashed``; raises ``ValueError`` for another kind."""
    r, s = int.from_bytes(c.sig[:32], "big"), int.from_bytes(c.sig[32:], "big")
    pk, msg, sig, pre, p = c.pk, c.msg, c.sig, c.prehashed, curve.p
    if kind == "bit-flip":
        it = kat.mutate(kat.Item(curve.scheme, pk, msg, sig, prehashed=pre), rng)
        pk, msg, sig = it.public_key, it.message, it.signature
    elif kind in RS_KINDS:
        sig = out_of_range(kind, r, s, curve.n, rng)
    elif kind == "off-curve-key":
        if len(pk) == 65:
            y = (int.from_bytes(pk[33:], "big") + rng.choice([-2, -1, 1, 2])) % p
            pk = pk[:33] + i2b(y)
        else:
            pk = pk[:1] + i2b(curve.non_residue_x(int.from_bytes(pk[1:], "big")))
    elif kind == "x>=p-key":
        pk = pk[:1] + i2b(p + rng.randrange(2**256 - p)) + pk[33:]
    elif kind == "bad-prefix":
        valid = curve.prefixes[len(pk)]
        pk = bytes([rng.choice([b for b in range(256) if b not in valid])]) + pk[1:]
    elif kind == "other-message":
        msg = bytes([msg[0] ^ 0x80]) + msg[1:] if msg else b"\x00"
    elif kind == "prehash-length":
        digest = msg if pre else hashlib.sha256(msg).digest()
        msg = digest[: rng.choice([0, 31])] if rng.random() < 0.5 else digest + b"\x00"
        pre = True
    else:
        raise ValueError(kind)
    return Case(kind, pk, msg, sig, pre)


def run_chunk(curve: Curve, cases: list[Case], chunk: Chunk) -> Tally:
    """Check one chunk's ``cases``: the kernel's verdicts (one call per options) against the
    reference's, per kind, each case counted by key length and :attr:`Curve.counted` options."""
    by_kind: dict[str, list[Case]] = {}
    for c in cases:
        by_kind.setdefault(c.kind, []).append(c)

    def kernel(group: list[Case]) -> list[bool]:
        return kernel_by_options(curve.scheme, group, ("prehashed", curve.option))

    def reference(group: list[Case]) -> list[bool]:
        return [curve.reference(c.pk, c.msg, c.sig, prehashed=c.prehashed, **{curve.option: getattr(c, curve.option)})
                for c in group]

    def describe(c: Case) -> dict:
        return {"pk": c.pk.hex(), "msg": hexed(c.msg), "sig": c.sig.hex(), "prehashed": c.prehashed,
                curve.option: getattr(c, curve.option)}

    tally = Tally()
    with CheckFailures(tally, chunk.set_id, host_library(curve.scheme)):
        for kind, group in by_kind.items():
            compare(tally, chunk.set_id, kind, group, kernel, reference, describe=describe)
            for c in group:
                tally.count(chunk.set_id, kind, **{f"pk{len(c.pk)}": 1},
                            **{name: int(getattr(c, name)) for name in curve.counted})
    return tally
