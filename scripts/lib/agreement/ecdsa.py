"""What the ECDSA agreement suites (secp256k1, p256) share: the signatures out of the range
r, s ∈ [1, n − 1] that SEC 1 v2 §4.1.4 step 1 (FIPS 186-5 §6.4.2 step 1) rejects."""

from __future__ import annotations

import random

#: The mutation kinds :func:`out_of_range` makes.
RS_KINDS = ("r=0", "s=0", "r>=n", "s>=n", "r=n", "s=n")


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
