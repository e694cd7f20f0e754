#!/usr/bin/env python3
"""Generate app/engine/kernels/secp256k1_tables.cuh: every derived constant the secp256k1
kernel uses, computed here from the curve's definition so none is typed by hand.

Usage: scripts/gen_secp256k1_tables.py [--check]

Without arguments the header is (re)written; ``--check`` exits 1 when the committed header
differs from what this script produces (tests/test_kernel_secp256k1.py runs the same check).

Inputs are only the SEC 2 v2 §2.4.1 domain parameters (p, n, G).  Derived here, each with an
assertion that it is right:
  - the GLV endomorphism (Gallant–Lambert–Vanstone 2001): λ, a non-trivial cube root of unity
    mod n, and β, the one mod p with λ·(x, y) = (β·x, y);
  - a short basis (a1, b1), (a2, b2) of the lattice {(a, b) : a + b·λ ≡ 0 (mod n)} by the
    extended Euclidean algorithm (Hankerson–Menezes–Vanstone, Guide to ECC, Alg. 3.74), and
    g1 = round(2^384·b2/n), g2 = round(2^384·(−b1)/n) for the rounding split, with a proof
    below that both halves it yields are below 2^128 in absolute value;
  - Montgomery constants for scalars mod n (R = 2^256): R² mod n, −n⁻¹ mod 2^32, and λ, −b1,
    −b2 pre-multiplied by R;
  - a sliding-window schedule for the fixed exponent n − 2 (Fermat inversion mod n);
  - the affine odd multiples (2i+1)·G and (2i+1)·2^128·G, i < 2^(W_G−1), for the fixed-base
    half of R = u1·G + u2·Q.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

# SEC 2 v2 (2010), §2.4.1: secp256k1 domain parameters.
P = 2**256 - 2**32 - 977
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
GX = 0x79BE667EF9DCBBAC55A06295CE870B07029BFCDB2DCE28D959F2815B16F81798
GY = 0x483ADA7726A3C4655DA4FBFC0E1108A8FD17B448A68554199C47D08FFB10D4B8
B = 7

#: Window of the fixed-base tables: odd multiples 1..2^W_G − 1 (2^(W_G−1) points per table).
W_G = 8
#: Window of the sliding-window schedule for the scalar inversion exponent n − 2.
W_INV = 4

OUT = Path(__file__).resolve().parents[1] / "app" / "engine" / "kernels" / "secp256k1_tables.cuh"


# ------------------------------------------------------------------ affine arithmetic (None = ∞)
def on_curve(pt) -> bool:
    x, y = pt
    return (y * y - x * x * x - B) % P == 0


def add(p1, p2):
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    (x1, y1), (x2, y2) = p1, p2
    if x1 == x2:
        if (y1 + y2) % P == 0:
            return None
        lam = 3 * x1 * x1 * pow(2 * y1, -1, P) % P
    else:
        lam = (y2 - y1) * pow(x2 - x1, -1, P) % P
    x3 = (lam * lam - x1 - x2) % P
    return x3, (lam * (x1 - x3) - y1) % P


def mul(k: int, pt):
    out = None
    while k:
        if k & 1:
            out = add(out, pt)
        pt = add(pt, pt)
        k >>= 1
    return out


G = (GX, GY)


# ------------------------------------------------------------------ GLV constants
def cube_root_of_unity(m: int) -> int:
    """A non-trivial cube root of unity mod the prime m (m ≡ 1 mod 3)."""
    assert (m - 1) % 3 == 0
    for g in range(2, 100):
        r = pow(g, (m - 1) // 3, m)
        if r != 1:
            assert pow(r, 3, m) == 1
            return r
    raise AssertionError("no cube root of unity found")


def glv_lambda_beta_pairs() -> list[tuple[int, int]]:
    """Both non-trivial (λ, β) with λ·(x, y) = (β·x, y), checked on G."""
    lam0, beta0 = cube_root_of_unity(N), cube_root_of_unity(P)
    pairs = []
    for lam in (lam0, lam0 * lam0 % N):
        lg = mul(lam, G)
        match = [b for b in (beta0, beta0 * beta0 % P) if lg == (b * GX % P, GY)]
        assert len(match) == 1
        pairs.append((lam, match[0]))
    return pairs


def isqrt(v: int) -> int:
    x = 1 << ((v.bit_length() + 1) // 2)
    while True:
        y = (x + v // x) // 2
        if y >= x:
            return x
        x = y


def glv_basis(lam: int):
    """Short lattice basis by the extended Euclidean algorithm on (n, λ) (Guide to ECC Alg. 3.74)."""
    r = [N, lam]
    t = [0, 1]
    while r[-1] != 0:
        q = r[-2] // r[-1]
        r.append(r[-2] - q * r[-1])
        t.append(t[-2] - q * t[-1])
    root = isqrt(N)
    ell = max(i for i in range(len(r)) if r[i] >= root)  # the algorithm's index ℓ
    v1 = (r[ell + 1], -t[ell + 1])
    cands = [(r[ell], -t[ell]), (r[ell + 2], -t[ell + 2])]
    v2 = min(cands, key=lambda v: v[0] ** 2 + v[1] ** 2)
    for a, b in (v1, v2):
        assert (a + b * lam) % N == 0
    return v1, v2


def glv_constants():
    # Of the two cube roots λ, take one whose basis orientation has det = a1·b2 − a2·b1 = +n,
    # positive rounding multipliers b2 and −b1 (the kernel multiplies unsigned) and
    # g1, g2 < 2^256 (one 8-limb product each).
    found = None
    for lam, beta in glv_lambda_beta_pairs():
        v1, v2 = glv_basis(lam)
        for (x1, y1), (x2, y2) in ((v1, v2), (v2, v1)):
            for s1 in (1, -1):
                for s2 in (1, -1):
                    a1, b1, a2, b2 = s1 * x1, s1 * y1, s2 * x2, s2 * y2
                    if a1 * b2 - a2 * b1 != N or b2 <= 0 or -b1 <= 0:
                        continue
                    g1 = (b2 * 2**384 + N // 2) // N
                    g2 = (-b1 * 2**384 + N // 2) // N
                    if g1 < 2**256 and g2 < 2**256 and found is None:
                        found = (lam, beta, (a1, b1, a2, b2), (g1, g2))
    assert found, "no GLV basis fits the kernel's unsigned 256-bit rounding"
    lam, beta, (a1, b1, a2, b2), g = found
    # Bound.  With c1 = b2·k/n + e1, c2 = −b1·k/n + e2 the split gives
    # k1 = −e1·a1 − e2·a2 and k2 = −e1·b1 − e2·b2 exactly (det = n).  The rounding of
    # k·g/2^384 errs by at most 1/2 plus k·(1/2)/2^384 < 2^−129 from rounding g, so
    # |e| < 1/2 + 2^−129 and |k1| < (1/2 + 2^−129)(|a1| + |a2|), likewise |k2|.
    bound = lambda u, v: ((abs(u) + abs(v)) * (2**129 + 2) + 2**130 - 1) // 2**130  # noqa: E731
    assert bound(a1, a2) < 2**128 and bound(b1, b2) < 2**128, "GLV halves may exceed 128 bits"
    return lam, beta, (a1, b1, a2, b2), g


def glv_split(k: int, lam: int, basis, g) -> tuple[int, int]:
    """The split the kernel performs, in integers: k ≡ k1 + k2·λ (mod n), both mod n."""
    _, b1, _, b2 = basis
    g1, g2 = g
    c1 = (k * g1 + 2**383) >> 384
    c2 = (k * g2 + 2**383) >> 384
    k2 = (c1 * (-b1) + c2 * (-b2)) % N
    k1 = (k - k2 * lam) % N
    return k1, k2


def signed_magnitude(k: int) -> int:
    return k if k <= N // 2 else N - k


# ------------------------------------------------------------------ inversion schedule
def sliding_window_schedule(e: int, w: int) -> list[tuple[int, int]]:
    """Steps (squarings, odd power index or −1) computing x^e from the odd powers x^(2j+1).

    Starting from 1 (represented by the first step, whose squarings are zero), each step
    squares the accumulator ``squarings`` times then multiplies by x^(2·index+1) when the
    index is not −1.  The first step sets the accumulator to its odd power.
    """
    bits = bin(e)[2:]
    steps: list[tuple[int, int]] = []
    i, pending = 0, 0
    while i < len(bits):
        if bits[i] == "0":
            pending += 1
            i += 1
            continue
        j = min(i + w, len(bits))
        while bits[j - 1] == "0":
            j -= 1
        val = int(bits[i:j], 2)
        steps.append((pending + (j - i), (val - 1) // 2))
        pending = 0
        i = j
    if pending:
        steps.append((pending, -1))
    # Check by replaying the schedule on exponents.
    acc = 0
    for n_sq, idx in steps:
        acc <<= n_sq
        if idx >= 0:
            acc += 2 * idx + 1
    assert acc == e
    return steps


# ------------------------------------------------------------------ rendering
def limbs(v: int, count: int = 8) -> str:
    assert 0 <= v < 2 ** (32 * count)
    return "{" + ", ".join(f"0x{(v >> (32 * i)) & 0xFFFFFFFF:08X}u" for i in range(count)) + "}"


def point_table(name: str, base, count: int) -> list[str]:
    out = [f"ZV_CONSTANT k1_ge_storage {name}[{count}] = {{"]
    two = add(base, base)
    pt = base
    for i in range(count):
        assert on_curve(pt)
        out.append(f"    {{{limbs(pt[0])}, {limbs(pt[1])}}},  /* {2 * i + 1} */")
        pt = add(pt, two)
    out.append("};")
    return out


def render() -> str:
    lam, beta, basis, g = glv_constants()
    a1, b1, a2, b2 = basis
    rng = random.Random(1)
    samples = [0, 1, 2, N - 1, N - 2, N // 2, N // 2 + 1, lam, N - lam, 2**128, 2**255 % N]
    samples += [rng.randrange(N) for _ in range(2000)]
    worst = 0
    for k in samples:
        k1, k2 = glv_split(k, lam, basis, g)
        assert (k1 + k2 * lam) % N == k
        worst = max(worst, signed_magnitude(k1).bit_length(), signed_magnitude(k2).bit_length())
    assert worst <= 128
    R = 2**256
    n0inv = (-pow(N, -1, 2**32)) % 2**32
    steps = sliding_window_schedule(N - 2, W_INV)
    g128 = mul(2**128, G)
    ntab = 2 ** (W_G - 1)
    lines = [
        "/* secp256k1_tables.cuh — GENERATED by scripts/gen_secp256k1_tables.py; do not edit.",
        " *",
        " * Derived from the SEC 2 v2 §2.4.1 domain parameters (p, n, G) by that script, which",
        " * asserts each value (see its docstring).  Regenerate: python3 scripts/gen_secp256k1_tables.py",
        " * Limbs are 32-bit, least significant first.",
        " */",
        "#ifndef ZV_SECP256K1_TABLES_CUH",
        "#define ZV_SECP256K1_TABLES_CUH",
        "",
        '#include "zv_port.cuh"',
        "",
        "/* An affine point as stored in the tables (coordinates fully reduced mod p). */",
        "typedef struct { zv_u32 x[8]; zv_u32 y[8]; } k1_ge_storage;",
        "",
        "/* The group order n and p − n (r + n < p decides whether x(R) ≥ n can match r). */",
        f"ZV_CONSTANT zv_u32 K1_N[8] = {limbs(N)};",
        f"ZV_CONSTANT zv_u32 K1_N_HALF[8] = {limbs(N // 2)};",
        f"ZV_CONSTANT zv_u32 K1_P_MINUS_N[8] = {limbs(P - N)};",
        "",
        "/* Montgomery arithmetic mod n with R = 2^256. */",
        f"ZV_CONSTANT zv_u32 K1_N_R2[8] = {limbs(R * R % N)};  /* R^2 mod n */",
        f"#define K1_N_N0INV 0x{n0inv:08X}u  /* -n^-1 mod 2^32 */",
        "",
        "/* GLV endomorphism: lambda*(x, y) = (beta*x, y); k = k1 + k2*lambda (mod n) with",
        " * c1 = round(k*g1 / 2^384), c2 = round(k*g2 / 2^384), k2 = c1*(-b1) + c2*(-b2), k1 = k - k2*lambda.",
        f" * a1 = 0x{a1:x}, b1 = -0x{-b1:x},",
        f" * a2 = 0x{a2:x}, b2 = 0x{b2:x};",
        " * |k1|, |k2| < 2^128 (bound proved in the script). */",
        f"ZV_CONSTANT zv_u32 K1_BETA[8] = {limbs(beta)};",
        f"ZV_CONSTANT zv_u32 K1_GLV_G1[8] = {limbs(g[0])};",
        f"ZV_CONSTANT zv_u32 K1_GLV_G2[8] = {limbs(g[1])};",
        f"ZV_CONSTANT zv_u32 K1_LAMBDA_R[8] = {limbs(lam * R % N)};   /* lambda*R mod n */",
        f"ZV_CONSTANT zv_u32 K1_MINUS_B1_R[8] = {limbs((-b1) % N * R % N)};  /* -b1*R mod n */",
        f"ZV_CONSTANT zv_u32 K1_MINUS_B2_R[8] = {limbs((-b2) % N * R % N)};  /* -b2*R mod n */",
        "",
        f"/* x^(n-2) mod n by sliding windows of {W_INV} bits over the odd powers x^1..x^{2**W_INV - 1}:",
        " * step i squares K1_INV_SQ[i] times, then multiplies by x^(2*K1_INV_IDX[i]+1) unless the index is -1. */",
        f"#define K1_INV_STEPS {len(steps)}",
        f"#define K1_INV_ODD_POWERS {2 ** (W_INV - 1)}",
        "ZV_CONSTANT zv_u8 K1_INV_SQ[K1_INV_STEPS] = {" + ", ".join(str(s) for s, _ in steps) + "};",
        "ZV_CONSTANT signed char K1_INV_IDX[K1_INV_STEPS] = {" + ", ".join(str(i) for _, i in steps) + "};",
        "",
        f"/* Fixed-base tables: (2i+1)*G and (2i+1)*2^128*G for i < {ntab} (window W_G = {W_G}). */",
        f"#define K1_W_G {W_G}",
        f"#define K1_G_TABLE_SIZE {ntab}",
    ]
    lines += point_table("K1_G_ODD", G, ntab)
    lines += point_table("K1_G128_ODD", g128, ntab)
    lines += ["", "#endif /* ZV_SECP256K1_TABLES_CUH */", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed header is stale")
    args = ap.parse_args()
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT} is stale: run scripts/gen_secp256k1_tables.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
