"""BLS12-381 arithmetic kernels (app/engine/kernels/bls12_381_*.cuh), host build, piece by
piece through the batch kernels of bls12_381_parts.cu: the field tower against Python
integers and py_ecc, the curves and point decoding against arkworks and the Ethereum
deserialization vectors, hash_to_G2 against RFC 9380 / Wycheproof / Ethereum vectors and
arkworks; and the generated constant tables against their generator.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import random
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.kernels import hostbuild

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler for the host build")


def _load_script(name: str):
    loader = importlib.machinery.SourceFileLoader(name, str(ROOT / "scripts" / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = mod
    loader.exec_module(mod)
    return mod


# scripts/bls12_381_arith_agreement holds the ctypes calls of the host build (and the
# ≥ 10 k-item agreement runs); the tests below run its pieces on small samples.
kern = _load_script("bls12_381_arith_agreement")
gen = _load_script("gen_bls12_381_tables")
P, lib, fp_batch, fp2_batch, fp_from_be64 = kern.P, kern.lib, kern.fp_batch, kern.fp2_batch, kern.fp_from_be64


@pytest.fixture(autouse=True)
def no_bound_failures():
    """Every test ends with zero failed ZV_CHECK bounds checks (zv_port.cuh)."""
    yield
    assert hostbuild.verify_failures(lib()) == (0 if hostbuild.verify_checks() else None)


def rand_fp(rng, n):
    edge = [0, 1, 2, P - 1, P - 2, (P - 1) // 2, (P + 1) // 2, 2**380, 2**256 - 1]
    return edge + [rng.randrange(P) for _ in range(n - len(edge))]


# ------------------------------------------------------------------ Fp
def test_fp_ring_laws_against_python_ints():
    rng = random.Random(1)
    a, b = rand_fp(rng, 300), rand_fp(rng, 300)
    b = b[::-1]
    for op, want in [("add", lambda x, y: (x + y) % P), ("sub", lambda x, y: (x - y) % P),
                     ("mul", lambda x, y: x * y % P), ("sqr", lambda x, y: x * x % P),
                     ("neg", lambda x, y: -x % P), ("dbl", lambda x, y: 2 * x % P),
                     ("inv", lambda x, y: pow(x, P - 2, P))]:
        got, ok = fp_batch(op, a, b)
        assert all(ok)
        assert got == [want(x, y) for x, y in zip(a, b)], op


def test_fp_sqrt_returns_a_root_exactly_for_squares():
    rng = random.Random(2)
    a = rand_fp(rng, 200)
    got, ok = fp_batch("sqrt", a, a)
    for x, r, k in zip(a, got, ok):
        is_square = x == 0 or pow(x, (P - 1) // 2, P) == 1
        assert k == is_square
        if k:
            assert r * r % P == x


def test_fp_rejects_non_canonical_inputs_and_reads_sign():
    got, ok = fp_batch("add", [P, P + 1, 2**384 - 1, P - 1], [0, 0, 0, 0])
    assert ok == [0, 0, 0, 1]
    _, sgn = fp_batch("sgn0", [0, 1, 2, P - 1], [0] * 4)
    assert sgn == [0, 1, 0, 0]  # P − 1 is even


def test_fp_wide_reduction_matches_os2ip_mod_p():
    rng = random.Random(3)
    vals = [0, 2**512 - 1, P, P * (2**128), 2**384] + [rng.getrandbits(512) for _ in range(200)]
    assert fp_from_be64(vals) == [v % P for v in vals]


# ------------------------------------------------------------------ Fp2
def test_fp2_field_laws_against_py_ecc():
    from py_ecc.fields import optimized_bls12_381_FQ2 as FQ2

    rng = random.Random(4)
    a = [(x, y) for x, y in zip(rand_fp(rng, 200), rand_fp(rng, 200)[::-1])]
    b = [(rng.randrange(P), rng.randrange(P)) for _ in a]
    pa = [FQ2(list(x)) for x in a]
    pb = [FQ2(list(x)) for x in b]

    def t(e):
        return tuple(int(c) for c in e.coeffs)

    xi = FQ2([1, 1])
    cases = {
        "add": [t(x + y) for x, y in zip(pa, pb)],
        "sub": [t(x - y) for x, y in zip(pa, pb)],
        "mul": [t(x * y) for x, y in zip(pa, pb)],
        "sqr": [t(x * x) for x in pa],
        "neg": [t(-x) for x in pa],
        "dbl": [t(x + x) for x in pa],
        "inv": [t(x.inv()) if x != FQ2.zero() else (0, 0) for x in pa],
        "conj": [t(FQ2([int(x.coeffs[0]), -int(x.coeffs[1])])) for x in pa],
        "mul_by_xi": [t(x * xi) for x in pa],
        "mul_fp": [t(x * int(y.coeffs[0])) for x, y in zip(pa, pb)],
    }
    for op, want in cases.items():
        got, ok = fp2_batch(op, a, b)
        assert all(ok)
        assert got == want, op
    # conjugation is the p-power Frobenius
    assert fp2_batch("conj", a[10:20], a[10:20])[0] == [t(x ** P) for x in pa[10:20]]


def test_fp2_sqrt_and_sgn0():
    rng = random.Random(5)
    squares = []
    for _ in range(60):
        x = (rng.randrange(P), rng.randrange(P))
        squares.append(fp2_batch("sqr", [x], [x])[0][0])
    # non-squares: a square times the non-residue Z = −(2 + u) of RFC 9380 §8.8.2
    z = (P - 2, P - 1)
    non_squares = fp2_batch("mul", squares[:30], [z] * 30)[0]
    edge = [(0, 0), (1, 0), (P - 1, 0), (0, 1), (5, 0), (0, 5)]
    vals = squares + non_squares + edge
    roots, ok = fp2_batch("sqrt", vals, vals)
    norm_square = [pow((a * a + b * b) % P, (P - 1) // 2, P) in (0, 1) for a, b in vals]
    assert ok == [int(s) for s in norm_square]
    assert ok[:60] == [1] * 60 and ok[60:90] == [0] * 30
    for v, r, k in zip(vals, roots, ok):
        if k:
            assert fp2_batch("sqr", [r], [r])[0][0] == v
    _, sgn = fp2_batch("sgn0", [(0, 1), (0, 2), (1, 2), (2, 1), (0, 0)], [(0, 0)] * 5)
    assert sgn == [1, 0, 1, 0, 0]


# ------------------------------------------------------------------ generated tables
def test_tables_header_is_what_the_generator_writes():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_bls12_381_tables"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_isogeny_constants_equal_py_ecc():
    """The RFC 9380 Appendix E.3 coefficients typed into the generator are py_ecc's."""
    from py_ecc.optimized_bls12_381 import constants as c

    tables = [c.ISO_3_X_NUMERATOR, c.ISO_3_X_DENOMINATOR, c.ISO_3_Y_NUMERATOR, c.ISO_3_Y_DENOMINATOR]
    for i, coeffs in enumerate(tables, start=1):
        for j, k in enumerate(coeffs):
            if (i, j) in gen.ISO_K:
                assert gen.ISO_K[(i, j)] == tuple(int(v) for v in k.coeffs), (i, j)
    assert gen.H_EFF == c.H_EFF_G2
