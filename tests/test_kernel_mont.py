"""The multiprecision and Montgomery templates (app/engine/kernels/fields/mont.cuh), host build,
against Python integers: every zv_mont_* operation for the two moduli the kernels use
(secp256k1's group order n through zv_k1_sc_modulus, BLS12-381's p through zv_fp_modulus) and
for two moduli no kernel uses yet (NIST P-256's p, whose top bit is set like n's, and the
Mersenne prime 2^127 − 1 on four limbs), so that the next prime field is a traits type
away; the wide products zv_mp_mul_wide / zv_mp_sqr_wide on 8 and 12 limbs; and the
contracts' ZV_CHECK bounds: zero failures on inputs inside them, counted failures outside.
"""

from __future__ import annotations

import ctypes
import random

import pytest

from app.engine.device import hostbuild

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler for the host build")

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
BLS12_381_P = int(
    "1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf6730d2a0f6b0f624"
    "1eabfffeb153ffffb9feffffffffaaab", 16)
P256_P = 2**256 - 2**224 + 2**192 + 2**96 - 1
M127 = 2**127 - 1

OPS = {"mul": 0, "sqr": 1, "add": 2, "sub": 3, "neg": 4, "to": 5, "from": 6, "lt_m": 7, "redc": 8}
MP_OPS = {"mul_wide": 0, "sqr_wide": 1, "lt": 2, "eq": 3, "is_zero": 4, "cmov": 5}


def _limbs(x: int, n: int) -> str:
    return "{" + ", ".join(f"0x{(x >> (32 * i)) & 0xFFFFFFFF:08X}u" for i in range(n)) + "}"


def _traits(name: str, m: int, n: int) -> str:
    """A modulus traits type for mont.cuh written from m alone (what a new field adds)."""
    r = 1 << (32 * n)
    n0 = -pow(m, -1, 1 << 32) % (1 << 32)
    return f"""
ZV_CONSTANT zv_u32 {name.upper()}_R2[{n}] = {_limbs(r * r % m, n)};
struct {name} {{
    static constexpr int N = {n};
    static constexpr zv_u32 N0 = 0x{n0:08X}u;
    static ZV_HD_MEMBER void modulus(zv_u32 m[{n}]) {{
        const zv_u32 p[{n}] = {_limbs(m, n)};
        for (int i = 0; i < {n}; i++) m[i] = p[i];
    }}
    static ZV_HD_MEMBER const zv_u32 *r2() {{ return {name.upper()}_R2; }}
}};
"""


# name in the harness -> (modulus, limbs)
MODULI = {
    "zv_k1_sc_modulus": (SECP256K1_N, 8),
    "zv_fp_modulus": (BLS12_381_P, 12),
    "t_p256_modulus": (P256_P, 8),
    "t_m127_modulus": (M127, 4),
}

SRC = (
    '#include "fields/mont.cuh"\n#include "fields/secp256k1_scalar.cuh"\n#include "fields/bls12_381_fp.cuh"\n'
    + _traits("t_p256_modulus", P256_P, 8)
    + _traits("t_m127_modulus", M127, 4)
    + r"""
/* op on item i: a has 2N limbs per item (redc's input), b and r N limbs. */
template <class M> void t_mont(int op, const zv_u32 *a, const zv_u32 *b, zv_u32 *r, zv_u64 n) {
    const int N = M::N;
    for (zv_u64 i = 0; i < n; i++) {
        const zv_u32 *x = a + 2 * N * i, *y = b + N * i;
        zv_u32 *z = r + N * i;
        zv_u32 t[2 * N];
        switch (op) {
        case 0: zv_mont_mul<M>(z, x, y); break;
        case 1: zv_mont_sqr<M>(z, x); break;
        case 2: zv_mont_add<M>(z, x, y); break;
        case 3: zv_mont_sub<M>(z, x, y); break;
        case 4: zv_mont_neg<M>(z, x); break;
        case 5: zv_mont_to<M>(z, x); break;
        case 6: zv_mont_from<M>(z, x); break;
        case 7: z[0] = (zv_u32)zv_mont_lt_m<M>(x); break;
        case 8: for (int k = 0; k < 2 * N; k++) t[k] = x[k];
                zv_mont_redc<M>(z, t); break;
        }
    }
}

/* op on item i: a and b N limbs, r 2N limbs. */
template <int N> void t_mp(int op, const zv_u32 *a, const zv_u32 *b, zv_u32 *r, zv_u64 n) {
    for (zv_u64 i = 0; i < n; i++) {
        const zv_u32 *x = a + N * i, *y = b + N * i;
        zv_u32 *z = r + 2 * N * i;
        switch (op) {
        case 0: zv_mp_mul_wide<N>(z, x, y); break;
        case 1: zv_mp_sqr_wide<N>(z, x); break;
        case 2: z[0] = (zv_u32)zv_mp_lt<N>(x, y); break;
        case 3: z[0] = (zv_u32)zv_mp_eq<N>(x, y); break;
        case 4: z[0] = (zv_u32)zv_mp_is_zero<N>(x); break;
        case 5: for (int k = 0; k < N; k++) z[k] = x[k];
                zv_mp_cmov<N>(z, y, (int)(x[0] & 1)); break;
        }
    }
}

#define T_MONT(M) ZV_KERNEL void t_##M(int op, const zv_u32 *a, const zv_u32 *b, zv_u32 *r, \
                                         zv_u64 n) { t_mont<M>(op, a, b, r, n); }
T_MONT(zv_k1_sc_modulus)
T_MONT(zv_fp_modulus)
T_MONT(t_p256_modulus)
T_MONT(t_m127_modulus)
ZV_KERNEL void t_mp8(int op, const zv_u32 *a, const zv_u32 *b, zv_u32 *r, zv_u64 n) { t_mp<8>(op, a, b, r, n); }
ZV_KERNEL void t_mp12(int op, const zv_u32 *a, const zv_u32 *b, zv_u32 *r, zv_u64 n) { t_mp<12>(op, a, b, r, n); }
"""
)


def _lib(name: str = "mont_unit") -> ctypes.CDLL:
    return hostbuild.load_code(SRC, name)


def _pack(values: list[int], limbs: int) -> ctypes.Array:
    raw = b"".join(v.to_bytes(4 * limbs, "little") for v in values)
    return ctypes.create_string_buffer(raw, max(len(raw), 1))


def _unpack(buf: ctypes.Array, limbs: int, count: int) -> list[int]:
    raw = buf.raw
    return [int.from_bytes(raw[4 * limbs * i:4 * limbs * (i + 1)], "little") for i in range(count)]


def mont(lib: ctypes.CDLL, modulus: str, op: str, a: list[int], b: list[int] | None = None) -> list[int]:
    """Run one zv_mont_* operation of modulus ``modulus`` on items (a[i], b[i]); a ints are
    packed as 2N limbs (redc's input width), b and the outputs as N limbs."""
    n = MODULI[modulus][1]
    b = b if b is not None else [0] * len(a)
    out = ctypes.create_string_buffer(4 * n * len(a))
    getattr(lib, f"t_{modulus}")(ctypes.c_int(OPS[op]), _pack(a, 2 * n), _pack(b, n), out,
                                 ctypes.c_uint64(len(a)))
    return _unpack(out, n, len(a))


def mp(lib: ctypes.CDLL, limbs: int, op: str, a: list[int], b: list[int]) -> list[int]:
    out = ctypes.create_string_buffer(8 * limbs * len(a))
    getattr(lib, f"t_mp{limbs}")(ctypes.c_int(MP_OPS[op]), _pack(a, limbs), _pack(b, limbs), out,
                                 ctypes.c_uint64(len(a)))
    return _unpack(out, 2 * limbs, len(a))


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    return _lib()


@pytest.fixture(autouse=True)
def no_bound_failures(lib):
    """Inputs inside the contracts never fail a ZV_CHECK (zv_port.cuh)."""
    yield
    assert hostbuild.verify_failures(lib) == (0 if hostbuild.verify_checks() else None)


def _residues(rng: random.Random, m: int, count: int) -> list[int]:
    edge = [0, 1, 2, m - 1, m - 2, m // 2, (m + 1) // 2]
    return edge + [rng.randrange(m) for _ in range(count - len(edge))]


def _words(rng: random.Random, m: int, limbs: int, count: int) -> list[int]:
    """Any N-limb values (mul's left operand, to/from): the residues' edges and the top."""
    top = (1 << (32 * limbs)) - 1
    edge = [0, 1, m - 1, m, m + 1, top, top - 1, top - m]
    return edge + [rng.randrange(top + 1) for _ in range(count - len(edge))]


@pytest.mark.parametrize("modulus", sorted(MODULI))
def test_montgomery_operations_match_python_integers(lib, modulus):
    """Every contract of mont.cuh's header on its edges and random inputs; for the two family
    traits this also checks their tables' −m^−1 and R^2 (to() multiplies by r2())."""
    m, limbs = MODULI[modulus]
    r = 1 << (32 * limbs)
    r_inv = pow(r, -1, m)
    rng = random.Random(limbs * 1000 + m % 997)
    a, b = _residues(rng, m, 300), _residues(rng, m, 300)[::-1]
    words = _words(rng, m, limbs, 300)
    assert mont(lib, modulus, "mul", words, b) == [x * y * r_inv % m for x, y in zip(words, b)]
    assert mont(lib, modulus, "sqr", a) == [x * x * r_inv % m for x in a]
    assert mont(lib, modulus, "add", a, b) == [(x + y) % m for x, y in zip(a, b)]
    assert mont(lib, modulus, "sub", a, b) == [(x - y) % m for x, y in zip(a, b)]
    assert mont(lib, modulus, "neg", a) == [-x % m for x in a]
    assert mont(lib, modulus, "to", words) == [x * r % m for x in words]
    assert mont(lib, modulus, "from", words) == [x * r_inv % m for x in words]
    assert mont(lib, modulus, "lt_m", words) == [int(x < m) for x in words]
    wide = [0, 1, m - 1, m * r - 1, (m - 1) * (m - 1)] + [rng.randrange(m * r) for _ in range(295)]
    assert mont(lib, modulus, "redc", wide) == [t * r_inv % m for t in wide]


@pytest.mark.parametrize("modulus", sorted(MODULI))
def test_to_and_from_montgomery_form_round_trip(lib, modulus):
    m, limbs = MODULI[modulus]
    xs = _residues(random.Random(7), m, 100)
    assert mont(lib, modulus, "from", mont(lib, modulus, "to", xs)) == xs


@pytest.mark.parametrize("limbs", [8, 12])
def test_wide_products_are_exact(lib, limbs):
    rng = random.Random(limbs)
    top = (1 << (32 * limbs)) - 1
    a = [0, 1, top, top, 1 << (32 * limbs - 1)] + [rng.randrange(top + 1) for _ in range(195)]
    b = [top, 0, top, 1, 1 << (32 * limbs - 1)] + [rng.randrange(top + 1) for _ in range(195)]
    assert mp(lib, limbs, "mul_wide", a, b) == [x * y for x, y in zip(a, b)]
    assert mp(lib, limbs, "sqr_wide", a, b) == [x * x for x in a]


@pytest.mark.parametrize("limbs", [8, 12])
def test_comparisons_and_select(lib, limbs):
    rng = random.Random(limbs + 1)
    top = (1 << (32 * limbs)) - 1
    a = [0, 0, 5, top, top - 1, 1 << 32] + [rng.randrange(top + 1) for _ in range(94)]
    b = [0, 1, 5, top, top, 1 << 31] + [rng.randrange(top + 1) for _ in range(94)]

    def low_word(v: list[int]) -> list[int]:
        return [x & 0xFFFFFFFF for x in v]

    assert low_word(mp(lib, limbs, "lt", a, b)) == [int(x < y) for x, y in zip(a, b)]
    assert low_word(mp(lib, limbs, "eq", a, b)) == [int(x == y) for x, y in zip(a, b)]
    assert low_word(mp(lib, limbs, "is_zero", a, b)) == [int(x == 0) for x in a]
    got = [v & top for v in mp(lib, limbs, "cmov", a, b)]
    assert got == [y if x & 1 else x for x, y in zip(a, b)]


@pytest.mark.skipif(not hostbuild.verify_checks(), reason="ZV_CHECK counts only in verify builds")
def test_inputs_outside_the_contracts_are_counted():
    """b ≥ m for a product, or an addend ≥ m, breaks the one-subtraction bound: the verify
    build counts it (a separate library, so the other tests' zero count is untouched)."""
    bad = _lib("mont_contract")
    m, _ = MODULI["zv_fp_modulus"]
    mont(bad, "zv_fp_modulus", "mul", [1], [m])
    assert hostbuild.verify_failures(bad) >= 1
    before = hostbuild.verify_failures(bad)
    mont(bad, "zv_k1_sc_modulus", "add", [SECP256K1_N], [SECP256K1_N - 1])
    assert hostbuild.verify_failures(bad) > before
