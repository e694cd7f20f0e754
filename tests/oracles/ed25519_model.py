"""A pure-Python model of edwards25519 (RFC 8032 §5.1), for the table generator and tests.

Slow and simple on purpose: Python integers, affine coordinates, no shortcuts.  It
derives every constant the Ed25519 kernel uses (``scripts/gen_ed25519_tables`` writes
them to ``ed25519_tables.cuh``) and builds the special points the kernel tests need
(small-order points, mixed-order keys, non-canonical encodings).  It is not a verifier:
verdicts come from libsodium (:func:`app.engine.reference.reference.verify_ed25519`).
"""

from __future__ import annotations

import functools
import hashlib

#: The field prime 2^255 - 19 (RFC 8032 §5.1).
P = 2**255 - 19
#: The prime order of the base point, 2^252 + 27742317777372353535851937790883648493.
L = 2**252 + 27742317777372353535851937790883648493
#: The curve constant d = -121665 / 121666 (mod p).
D = (-121665 * pow(121666, P - 2, P)) % P
#: A square root of -1 mod p: 2^((p-1)/4).
SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = tuple[int, int]  # affine (x, y); the identity is (0, 1)
IDENTITY: Point = (0, 1)


def add(p: Point, q: Point) -> Point:
    """The twisted Edwards sum for a = -1 (complete on edwards25519)."""
    (x1, y1), (x2, y2) = p, q
    t = D * x1 * x2 * y1 * y2 % P
    x3 = (x1 * y2 + x2 * y1) * pow(1 + t, P - 2, P) % P
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, P - 2, P) % P
    return x3, y3


def neg(p: Point) -> Point:
    return (-p[0]) % P, p[1]


def mul(k: int, p: Point) -> Point:
    """[k]p for any integer k (negative k multiplies -p)."""
    if k < 0:
        return mul(-k, neg(p))
    r = IDENTITY
    while k:
        if k & 1:
            r = add(r, p)
        p = add(p, p)
        k >>= 1
    return r


def recover_x(y: int, sign: int) -> int | None:
    """The x with this y and parity ``sign`` (RFC 8032 §5.1.3 step 2-4), or None."""
    if y >= P:
        return None
    u, v = (y * y - 1) % P, (D * y * y + 1) % P
    x2 = u * pow(v, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = P - x
    return x


def encode(p: Point) -> bytes:
    """RFC 8032 §5.1.2: y little-endian with the parity of x in bit 255."""
    x, y = p
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def decode(s: bytes) -> Point | None:
    """RFC 8032 §5.1.3 (strict: y < p, and x = 0 with the sign bit set is rejected)."""
    v = int.from_bytes(s, "little")
    y, sign = v & (2**255 - 1), v >> 255
    x = recover_x(y, sign)
    return None if x is None else (x, y)


#: The base point B: y = 4/5, x even (RFC 8032 §5.1).
B: Point = (recover_x(4 * pow(5, P - 2, P) % P, 0), 4 * pow(5, P - 2, P) % P)


@functools.cache
def torsion8() -> tuple[Point, ...]:
    """The eight points of order dividing 8, as [i]T for a generator T of order 8."""
    y = 2
    while True:
        x = recover_x(y, 0)
        if x is not None:
            t = mul(L, (x, y))  # kills the prime-order part
            if mul(4, t) != IDENTITY:
                return tuple(mul(i, t) for i in range(8))
        y += 1


@functools.cache
def small_order_encodings() -> tuple[bytes, ...]:
    """Every 255-bit y (sign bit clear) that names a point of order dividing 8, including the
    non-canonical y + p where that fits in 255 bits: libsodium's blocklist."""
    ys = sorted({pt[1] for pt in torsion8()})
    out = []
    for y in ys:
        out.append(y.to_bytes(32, "little"))
        if y + P < 2**255:
            out.append((y + P).to_bytes(32, "little"))
    return tuple(out)


def sha512_mod_l(*parts: bytes) -> int:
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little") % L


def sign_with_scalar(a: int, r: int, msg: bytes, pk: bytes | None = None) -> tuple[bytes, bytes]:
    """(pk, sig) for secret scalar ``a`` and nonce ``r``: R = [r]B, S = r + k a mod L.

    ``pk`` overrides the encoded public key (to sign under A = [a]B + T for a torsion
    point T, pass that encoding; the signature then verifies only when [k]T = 0).
    """
    pk = encode(mul(a, B)) if pk is None else pk
    rr = encode(mul(r, B))
    k = sha512_mod_l(rr, pk, msg)
    s = (r + k * a) % L
    return pk, rr + s.to_bytes(32, "little")


# ------------------------------------------------------------------ adversarial items
#: The kinds :func:`mutants` makes, each a rule of libsodium's that a careless verifier breaks.
MUTANT_KINDS = ("bitflip", "s_plus_l", "s_eq_l", "s_high", "r_small_order", "a_small_order",
                "a_noncanonical", "a_off_curve", "r_noncanonical")


def off_curve_y(rng) -> int:
    """A random y < p for which no x exists (about half of all y)."""
    while True:
        y = rng.randrange(P)
        if recover_x(y, 0) is None:
            return y


def mutant(item, kind: str, rng):
    """A copy of the valid Ed25519 ``item`` (an :class:`app.core.batch.Item`) broken by ``kind``.

    ``bitflip`` flips one random bit of pk, msg or sig; ``s_plus_l`` adds L to S (the same
    residue, not canonical); ``s_eq_l`` sets S = L; ``s_high`` draws S in [L, 2^256);
    ``r_small_order`` / ``a_small_order`` put a blocklisted encoding (random sign bit) in R
    or A; ``a_noncanonical`` sets A's y to a value >= p; ``a_off_curve`` to a y with no x;
    ``r_noncanonical`` replaces R's y with a value >= p.
    """
    from dataclasses import replace

    from app.engine.reference.kat import mutate

    sig = item.signature
    r, s = sig[:32], int.from_bytes(sig[32:], "little")
    sign = lambda: rng.randrange(2) << 255  # noqa: E731
    if kind == "bitflip":
        return mutate(item, rng)
    if kind == "s_plus_l":
        return replace(item, signature=r + (s + L).to_bytes(32, "little"))
    if kind == "s_eq_l":
        return replace(item, signature=r + L.to_bytes(32, "little"))
    if kind == "s_high":
        return replace(item, signature=r + rng.randrange(L, 2**256).to_bytes(32, "little"))
    small = small_order_encodings()
    if kind == "r_small_order":
        enc = int.from_bytes(rng.choice(small), "little") | sign()
        return replace(item, signature=enc.to_bytes(32, "little") + sig[32:])
    if kind == "a_small_order":
        enc = int.from_bytes(rng.choice(small), "little") | sign()
        return replace(item, public_key=enc.to_bytes(32, "little"))
    if kind == "a_noncanonical":
        return replace(item, public_key=(rng.randrange(P, 2**255) | sign()).to_bytes(32, "little"))
    if kind == "a_off_curve":
        return replace(item, public_key=(off_curve_y(rng) | sign()).to_bytes(32, "little"))
    if kind == "r_noncanonical":
        enc = rng.randrange(P, 2**255) | sign()
        return replace(item, signature=enc.to_bytes(32, "little") + sig[32:])
    raise ValueError(f"unknown mutant kind {kind!r}")


def mixed_order_items(rng, count: int, msg_len: int = 64) -> list:
    """``count`` items signed under keys A = [a]B + T with T a random point of order 2..8.

    libsodium (cofactorless) accepts such an item exactly when [k]T = 0, k the challenge
    hash, so about half of them are valid and half not: the case that tells apart a
    verifier that reduces k mod L and compares encodings from one that multiplies by 8.
    Signing uses libsodium's noclamp base multiplication, so thousands take a second.
    """
    import nacl.bindings as nb

    from app.core.batch import Item

    torsion = [encode(t) for t in torsion8()]
    out = []
    per_key = 16
    for start in range(0, count, per_key):
        a = rng.randrange(1, L)
        pk = nb.crypto_core_ed25519_add(nb.crypto_scalarmult_ed25519_base_noclamp(a.to_bytes(32, "little")),
                                        torsion[rng.randrange(1, 8)])
        for _ in range(min(per_key, count - start)):
            msg = rng.randbytes(msg_len)
            r = rng.randrange(1, L)
            rr = nb.crypto_scalarmult_ed25519_base_noclamp(r.to_bytes(32, "little"))
            k = sha512_mod_l(rr, pk, msg)
            s = (r + k * a) % L
            out.append(Item("ed25519", pk, msg, rr + s.to_bytes(32, "little")))
    return out
