"""The BLS12-381 pairing and verify kernel (app/engine/kernels/schemes/bls12_381.cu), host build.

The Fp6/Fp12 tower and the pairing are checked through host hooks against py_ecc's FQ12
and pairing on random elements and points; every verdict is compared with arkworks
(:func:`app.engine.reference.reference.verify_bls12_381`) on the handed vectors and on a CI sample
of generated valid and mutated items.  ``scripts/agreement --scheme bls12-381`` runs the same comparison
on >= 20 k valid and >= 20 k mutated items.  Every test ends with zero failed ZV_CHECKs.
"""

from __future__ import annotations

import ctypes
import importlib
import random
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from app.core.batch import Item
from app.engine.device import hostbuild
from app.engine.reference import kat
from app.vectors import _ethereum_bls, _wycheproof, from_json
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")

agreement = importlib.import_module("scripts.lib.agreement.bls12_381")  # scripts/agreement --scheme bls12-381
kernel_verdicts, reference_verdicts = agreement.kernel_verdicts, agreement.reference_verdicts
encodings = agreement.encodings  # scripts/lib/agreement/bls12_381_arith.py: compress, make_encoding

P = 0x1A0111EA397FE69A4B1BA7B6434BACD764774B84F38512BF6730D2A0F6B0F6241EABFFFEB153FFFFB9FEFFFFFFFFAAAB
X_ABS = 0xD201000000010000  # the curve parameter is x = −X_ABS


@pytest.fixture(scope="module")
def lib():
    return hostbuild.load("bls12_381")


@pytest.fixture(autouse=True)
def no_bound_failures(lib):
    """Every test ends with zero failed ZV_CHECK checks (zv_port.cuh)."""
    yield
    assert hostbuild.verify_failures(lib) == (0 if hostbuild.verify_checks() else None)


# ------------------------------------------------------------------ Fp12 <-> py_ecc
# py_ecc's FQ12 is Fp[w]/(w^12 − 2w^6 + 2): the same field, basis w^0..w^11, with
# u = w^6 − 1.  The kernel's tower coefficient c_(j).c_(i) ∈ Fp2 multiplies w^(2i + j).
def to_bytes(e) -> bytes:
    """py_ecc FQ12 -> the hooks' 576 bytes (12 big-endian Fp values in tower order)."""
    co = [int(c) for c in e.coeffs]
    out = b""
    for j in range(2):
        for i in range(3):
            k = 2 * i + j
            b = co[k + 6]
            out += ((co[k] + b) % P).to_bytes(48, "big") + b.to_bytes(48, "big")
    return out


def from_bytes(raw: bytes):
    from py_ecc.fields import optimized_bls12_381_FQ12 as FQ12

    v = [int.from_bytes(raw[48 * i:48 * i + 48], "big") for i in range(12)]
    co = [0] * 12
    for j in range(2):
        for i in range(3):
            a, b = v[2 * (3 * j + i)], v[2 * (3 * j + i) + 1]
            k = 2 * i + j
            co[k] = (co[k] + a - b) % P
            co[k + 6] = (co[k + 6] + b) % P
    return FQ12(co)


OPS = {"mul": 0, "sqr": 1, "inv": 2, "conj": 3, "frob1": 4, "frob2": 5, "cyc_sqr": 6, "line": 7,
       "final_exp": 8, "exp_by_x": 9, "fp6_sqr": 10, "fp6_inv": 11}


def fp12_op(lib, op: str, a, b=None):
    from py_ecc.fields import optimized_bls12_381_FQ12 as FQ12

    out = ctypes.create_string_buffer(576)
    assert lib.zv_bls12_381_hook_fp12(OPS[op], out, to_bytes(a), to_bytes(b if b is not None else FQ12.one()))
    return from_bytes(out.raw)


def random_fq12(rng):
    from py_ecc.fields import optimized_bls12_381_FQ12 as FQ12

    return FQ12([rng.randrange(P) for _ in range(12)])


def frobenius(a, n: int):
    from py_ecc.optimized_bls12_381.optimized_pairing import exp_by_p

    for _ in range(n):
        a = exp_by_p(a)
    return a


def cyclotomic(a):
    """a^((p^6 − 1)(p^2 + 1)), computed by py_ecc: an element of the cyclotomic subgroup."""
    m = frobenius(a, 6) / a
    return frobenius(m, 2) * m


# ------------------------------------------------------------------ the generated header
def test_pairing_tables_are_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_bls12_381_pairing_tables"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ the tower against py_ecc
def test_conversion_round_trips():
    rng = random.Random(1)
    a = random_fq12(rng)
    assert from_bytes(to_bytes(a)) == a


def test_fp12_ring_operations_match_py_ecc(lib):
    from py_ecc.fields import optimized_bls12_381_FQ12 as FQ12

    rng = random.Random(2)
    for _ in range(8):
        a, b = random_fq12(rng), random_fq12(rng)
        assert fp12_op(lib, "mul", a, b) == a * b
        assert fp12_op(lib, "sqr", a) == a * a
        assert fp12_op(lib, "inv", a) * a == FQ12.one()
        assert fp12_op(lib, "conj", a) == frobenius(a, 6)
        assert fp12_op(lib, "frob1", a) == frobenius(a, 1)
        assert fp12_op(lib, "frob2", a) == frobenius(a, 2)
    assert fp12_op(lib, "inv", FQ12.zero()) == FQ12.zero()


def test_fp6_squaring_and_inverse_embedded_in_fp12(lib):
    # Fp6 is the subfield {c0 + 0·w} = span of w^0, w^2, .., w^10 in py_ecc's basis.
    from py_ecc.fields import optimized_bls12_381_FQ12 as FQ12

    rng = random.Random(3)
    for _ in range(8):
        a = FQ12([rng.randrange(P) if k % 2 == 0 else 0 for k in range(12)])
        assert fp12_op(lib, "fp6_sqr", a) == a * a
        assert fp12_op(lib, "fp6_inv", a) * a == FQ12.one()


def test_sparse_line_multiplication_equals_full_multiplication(lib):
    # The hook multiplies by the line (b.c0.c0, b.c0.c1, b.c1.c1); the same product through
    # the full multiplication needs b with every other coefficient cleared.
    rng = random.Random(4)
    for _ in range(8):
        a, b = random_fq12(rng), random_fq12(rng)
        raw = bytearray(to_bytes(b))
        for slot in (2, 3, 5):  # c0.c2, c1.c0, c1.c2 (each 96 bytes)
            raw[96 * slot:96 * slot + 96] = bytes(96)
        sparse = from_bytes(bytes(raw))
        assert fp12_op(lib, "line", a, sparse) == a * sparse


def test_cyclotomic_squaring_and_exponentiation_by_x(lib):
    rng = random.Random(5)
    for _ in range(4):
        m = cyclotomic(random_fq12(rng))
        assert fp12_op(lib, "cyc_sqr", m) == m * m
        assert fp12_op(lib, "exp_by_x", m) == (m ** X_ABS).inv()  # x < 0
        assert fp12_op(lib, "conj", m) * m == m.one()  # conj is the inverse there


def test_final_exponentiation_is_the_cube_of_py_eccs(lib):
    from py_ecc.optimized_bls12_381.optimized_pairing import final_exponentiate

    rng = random.Random(6)
    for _ in range(2):
        f = random_fq12(rng)
        assert fp12_op(lib, "final_exp", f) == final_exponentiate(f) ** 3


# ------------------------------------------------------------------ the pairing
def _g1_bytes(pt) -> bytes:
    from py_ecc.optimized_bls12_381 import normalize

    x, y = normalize(pt)
    return int(x).to_bytes(48, "big") + int(y).to_bytes(48, "big")


def _g2_bytes(pt) -> bytes:
    from py_ecc.optimized_bls12_381 import normalize

    x, y = normalize(pt)
    return b"".join(int(c).to_bytes(48, "big") for c in (*x.coeffs, *y.coeffs))


def pairing_product(lib, ps, qs, final: bool = True):
    """Π e(P_i, Q_i) by the kernel's multi-Miller loop (py_ecc points)."""
    out = ctypes.create_string_buffer(576)
    assert lib.zv_bls12_381_hook_pairing(out, len(ps), b"".join(map(_g1_bytes, ps)) or b"\0",
                                         b"".join(map(_g2_bytes, qs)) or b"\0", int(final))
    return from_bytes(out.raw)


def test_pairing_is_py_eccs_to_the_minus_third_power(lib):
    # The kernel computes f_(x,Q)(P)^(3(p^12−1)/r) with x < 0 (conjugated Miller loop,
    # Hayashida–Hayasaka–Teruya hard part); py_ecc computes f_(|x|,Q)(P)^((p^12−1)/r).
    # f_(x) ≡ 1/f_(|x|) up to factors the final exponentiation kills, so kernel = py_ecc^(−3).
    from py_ecc.optimized_bls12_381 import G1, G2, curve_order, multiply, pairing

    rng = random.Random(7)
    for k in range(2):
        a, b = (1, 1) if k == 0 else (rng.randrange(1, curve_order), rng.randrange(1, curve_order))
        p, q = multiply(G1, a), multiply(G2, b)
        e = pairing_product(lib, [p], [q])
        assert e * pairing(q, p) ** 3 == e.one()


def test_pairing_is_bilinear_and_non_degenerate(lib):
    from py_ecc.optimized_bls12_381 import G1, G2, curve_order, multiply

    e = pairing_product(lib, [G1], [G2])
    assert e != e.one()  # non-degenerate
    assert e ** curve_order == e.one()  # lands in μ_r
    rng = random.Random(8)
    for _ in range(3):
        a, b = rng.randrange(1, curve_order), rng.randrange(1, curve_order)
        assert pairing_product(lib, [multiply(G1, a)], [multiply(G2, b)]) == e ** (a * b % curve_order)


def test_multi_miller_loop_is_the_product_of_pairings(lib):
    from py_ecc.optimized_bls12_381 import G1, G2, curve_order, multiply, neg

    rng = random.Random(9)
    a, b, c = (rng.randrange(1, curve_order) for _ in range(3))
    p1, q1, p2 = multiply(G1, a), multiply(G2, b), multiply(G1, c)
    e1, e2 = pairing_product(lib, [p1], [q1]), pairing_product(lib, [p2], [G2])
    assert pairing_product(lib, [p1, p2], [q1, G2]) == e1 * e2
    # the verifier's shape: e(aP, Q) · e(−P, aQ) = 1
    assert pairing_product(lib, [p1, neg(G1)], [G2, multiply(G2, a)]) == e1.one()
    assert pairing_product(lib, [], []) == e1.one()


# ------------------------------------------------------------------ verdicts vs arkworks
def assert_agrees(items: list[Item], expect: bool | None = None) -> list[bool]:
    got, want = kernel_verdicts(items), reference_verdicts(items)
    bad = [(i, items[i].public_key.hex(), items[i].signature.hex(), want[i], got[i])
           for i in range(len(items)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} disagreements with arkworks, first: {bad[:3]}"
    if expect is not None:
        assert all(v == expect for v in want), "the case does not test what it says"
    return got


def _records_items(records) -> tuple[list[Item], list[bool]]:
    kas = [from_json(r) for r in records]
    return [ka.item for ka in kas], [ka.expected for ka in kas]


def test_wycheproof_bls_pop_verify(vectors_root):
    items, expected = _records_items([r for r in _wycheproof(vectors_root) if r["scheme"] == "bls12-381"])
    assert len(items) == 26  # SOURCES.md: 13 valid, 13 invalid
    assert assert_agrees(items) == expected


def test_ethereum_verify_vectors(vectors_root):
    items, expected = _records_items(list(_ethereum_bls(vectors_root)))
    assert len(items) == 29 and sum(expected) == 10  # SOURCES.md
    assert assert_agrees(items) == expected


def test_generated_valid_and_every_mutant_kind():
    """A CI sample of scripts/agreement --scheme bls12-381: valid items and every mutant kind of them."""
    valid = kat.sign_items("bls12-381", 6, seed=1)
    others = kat.sign_items("bls12-381", 6, seed=2)
    rng = random.Random(10)
    mutated = [agreement.mutant(valid[i % 6], kind, others[i % 6], rng)
               for i, kind in enumerate(agreement.MUTANT_KINDS)]
    assert all(assert_agrees(valid))
    assert not any(assert_agrees(mutated))


def test_empty_and_long_messages():
    items = kat.sign_items("bls12-381", 2, seed=3, msg_len=0) + kat.sign_items("bls12-381", 1, seed=4, msg_len=5000)
    assert_agrees(items, expect=True)
    assert_agrees([replace(it, message=it.message + b"!") for it in items], expect=False)


def test_identity_signature_and_key(lib):
    [it] = kat.sign_items("bls12-381", 1, seed=5)
    inf1, inf2 = encodings.compress(1, None), encodings.compress(2, None)
    # σ = O decodes (it is in G2) and fails the pairing check; pk = O fails KeyValidate.
    assert_agrees([replace(it, signature=inf2), replace(it, public_key=inf1),
                   replace(it, public_key=inf1, signature=inf2)], expect=False)


def test_wrong_lengths_are_invalid_not_errors():
    [it] = kat.sign_items("bls12-381", 1, seed=6)
    cases = [replace(it, public_key=it.public_key + b"\0"), replace(it, public_key=it.public_key[:47]),
             replace(it, signature=it.signature + b"\0"), replace(it, signature=it.signature[:95]),
             replace(it, signature=it.signature[:48])]
    assert kernel_verdicts(cases) == [False] * len(cases)
    assert reference_verdicts(cases) == [False] * len(cases)


def test_decreasing_offsets_are_an_invalid_item_not_a_read(lib):
    [it] = kat.sign_items("bls12-381", 1, seed=7)
    pks = np.frombuffer(it.public_key * 2, np.uint8)
    sigs = np.frombuffer(it.signature * 2, np.uint8)
    msgs = np.frombuffer(it.message + b"\0", np.uint8)
    offsets = np.array([0, len(it.message), 0], np.uint64)  # item 1 runs backwards
    verdicts = np.full(2, 7, np.uint8)
    lib.zv_verify_bls12_381(ctypes.c_void_p(pks.ctypes.data), ctypes.c_uint32(48),
                            ctypes.c_void_p(sigs.ctypes.data), ctypes.c_uint32(96),
                            ctypes.c_void_p(msgs.ctypes.data), ctypes.c_void_p(offsets.ctypes.data),
                            ctypes.c_void_p(None), ctypes.c_uint32(0), ctypes.c_uint32(0),
                            ctypes.c_uint64(2), ctypes.c_void_p(verdicts.ctypes.data))
    assert verdicts.tolist() == [1, 0]
