"""The secp256k1 ECDSA kernel (app/engine/kernels/schemes/secp256k1.cu), host build, against
libsecp256k1 through coincurve (app/engine/reference/reference.py verify_secp256k1).

Two layers of secp256k1's own: the kernel's field, scalar and group routines against Python
integers (through tests/kernel_harness/secp256k1_unit.cu); the verify entry point against the
reference on the Wycheproof keys in every encoding, a generated sample and targeted edge
cases.  What both ECDSA kernels are tested for alike (the Wycheproof files, the agreement
suite at CI size, malformed offsets, the generated tables) is tests/test_kernel_ecdsa.py.
"""

from __future__ import annotations

import ctypes
import hashlib
import random
import subprocess
from pathlib import Path

import pytest

from app.engine.device import hostbuild
from app.engine.reference import kat
from app.vectors import convert_all, from_json
from tests.conftest import VECTORS, vectors_missing
from tests.ecdsa_kernel import SECP256K1, i2b, point_bytes

HARNESS = Path(__file__).resolve().parent / "kernel_harness" / "secp256k1_unit.cu"

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler for the host build")


gen, agreement, sign_digest = SECP256K1.gen, SECP256K1.agreement, SECP256K1.sign_digest
P, N, G = gen.P, gen.N, gen.G
R_MONT = 2**256


# ------------------------------------------------------------------ calling the kernel
# scripts/lib/agreement/secp256k1.py (scripts/agreement --scheme secp256k1) holds the ctypes
# call of the host build and the generator of mutated items; the CI sample below runs its
# chunks at a small size.
kernel_verify = agreement.kernel_verify


def assert_agrees(items, *, prehashed=False, allow_high_s=False, names=None) -> list[bool]:
    return SECP256K1.assert_agrees(items, prehashed=prehashed, flag=allow_high_s, names=names)


# ------------------------------------------------------------------ the unit harness
@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    out = tmp_path_factory.mktemp("k1unit") / "secp256k1_unit.so"
    cmd = [hostbuild.compiler(), *hostbuild.CXXFLAGS, *(["-DZV_VERIFY"] if hostbuild.verify_checks() else []),
           f"-I{hostbuild.KERNEL_DIR}", "-o", str(out), str(HARNESS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lib = ctypes.CDLL(str(out))
    for name in ("k1t_fe", "k1t_sc", "k1t_pubkey_parse"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


@pytest.fixture(autouse=True)
def _limb_bounds_hold(request):
    """Every test also checks the field's and scalar's documented bounds (ZV_CHECK, counted
    in the verify host builds the suite runs) in the kernel and, where used, the unit harness."""
    yield
    libs = {"kernel": hostbuild.load("secp256k1")}
    if "unit" in request.fixturenames:
        libs["unit harness"] = request.getfixturevalue("unit")
    for name, lib in libs.items():
        assert hostbuild.verify_failures(lib) == 0, f"a ZV_CHECK bound failed in the secp256k1 {name}"


def limbs(v: int, count: int = 8):
    return (ctypes.c_uint32 * count)(*[(v >> (32 * i)) & 0xFFFFFFFF for i in range(count)])


def value(arr, start: int = 0, count: int = 8) -> int:
    return sum(int(arr[start + i]) << (32 * i) for i in range(count))


def fe_op(unit, op: int, a: int, b: int = 0) -> tuple[int, int]:
    out = limbs(0)
    ret = unit.k1t_fe(op, limbs(a), limbs(b), out)
    return ret, value(out)


def sc_op(unit, op: int, a: int, b: int = 0, out_limbs: int = 8) -> tuple[int, list[int]]:
    out = limbs(0, out_limbs)
    ret = unit.k1t_sc(op, limbs(a), limbs(b), out)
    return ret, [value(out, 8 * i) for i in range(out_limbs // 8)]


def gej(pt, z: int = 1):
    """A Jacobian encoding of affine pt (None = ∞) with the given Z."""
    if pt is None:
        return limbs(1 << (32 * 24), 25)
    x, y = pt
    return limbs((x * z * z % P) | ((y * z**3 % P) << 256) | (z << 512), 25)


def affine(arr):
    if arr[24]:
        return None
    x, y, z = value(arr, 0), value(arr, 8), value(arr, 16)
    zi = pow(z, -1, P)
    return x * zi * zi % P, y * zi**3 % P


def ge(pt):
    return limbs(pt[0] | (pt[1] << 256), 16)


FIELD_EDGES = [0, 1, 2, 977, 2**32 + 976, 2**32 + 977, 2**32 + 978, P - 2, P - 1, P, P + 1,
               2**256 - 1, 2**256 - 2, 2**255, 2**224 - 1, 0xFFFFFFFF]


def field_samples(rng: random.Random, k: int = 40) -> list[int]:
    return FIELD_EDGES + [rng.randrange(2**256) for _ in range(k)]


def test_field_arithmetic_matches_integers(unit):
    rng = random.Random(11)
    xs = field_samples(rng)
    for a in xs:
        for b in xs[:: max(1, len(xs) // 12)] + [a]:
            for op, want in ((0, a + b), (1, a - b), (2, a * b)):
                _, got = fe_op(unit, op, a, b)
                assert got < 2**256 and got % P == want % P, (op, hex(a), hex(b))
        _, got = fe_op(unit, 3, a)
        assert got % P == a * a % P
        _, got = fe_op(unit, 4, a)
        assert got % P == -a % P
        for k in (2, 3, 4, 8, 0xFFFFFFFF):
            _, got = fe_op(unit, 5, a, k)
            assert got % P == a * k % P
        _, got = fe_op(unit, 6, a)
        assert got == a % P
        assert fe_op(unit, 9, a)[0] == (a % P == 0)
        assert fe_op(unit, 10, a, (a + P) % 2**256)[0] == ((a + P) < 2**256 or a % P == (a + P - 2**256) % P)
        assert fe_op(unit, 11, a)[0] == (a % P) & 1


def test_field_inverse_and_square_root(unit):
    rng = random.Random(12)
    for a in field_samples(rng, 20):
        _, inv = fe_op(unit, 7, a)
        assert inv % P == (pow(a, -1, P) if a % P else 0)
        ok, root = fe_op(unit, 8, a)
        is_square = pow(a % P, (P - 1) // 2, P) in (0, 1)
        assert ok == is_square
        if ok:
            assert root * root % P == a % P


def test_field_decoding_rejects_values_at_or_above_p(unit):
    for v, ok in ((0, 1), (P - 1, 1), (P, 0), (P + 1, 0), (2**256 - 1, 0)):
        raw = v.to_bytes(32, "big")
        ret, got = fe_op(unit, 12, int.from_bytes(raw, "little"))
        assert ret == ok
        if ok:
            assert got == v


def test_scalar_arithmetic_matches_integers(unit):
    rng = random.Random(13)
    edges = [0, 1, 2, N // 2, N // 2 + 1, N - 2, N - 1, 2**128, 2**128 - 1]
    xs = edges + [rng.randrange(N) for _ in range(30)]
    rinv = pow(R_MONT, -1, N)
    for a in xs:
        for b in xs[::5]:
            _, (got,) = sc_op(unit, 0, a, b)
            assert got == a * b * rinv % N
            _, (got,) = sc_op(unit, 2, a, b)
            assert got == (a + b) % N
            _, (got,) = sc_op(unit, 4, a, b)
            assert got == (a - b) % N
        _, (got,) = sc_op(unit, 3, a)
        assert got == -a % N
        assert sc_op(unit, 5, a)[0] == (a > N // 2)
        if a:
            _, (got,) = sc_op(unit, 1, a)
            assert got == pow(a, -1, N) * R_MONT % N
    # Montgomery products accept a first factor anywhere below 2^256 (a digest).
    for a in (2**256 - 1, N, N + 5):
        _, (got,) = sc_op(unit, 0, a, 12345)
        assert got == a * 12345 * rinv % N


@pytest.mark.parametrize("count", [1, 2, 127, 128, 256])
def test_batched_scalar_inversion_matches_the_single_one(unit, count):
    """zv_k1_sc_batch_inv_mont (the kernel's one inversion per block chunk) gives each s its
    own s^-1·R mod n, as zv_k1_sc_inv_mont does."""
    rng = random.Random(count)
    xs = ([1, 2, N - 1, N // 2] + [rng.randrange(1, N) for _ in range(count)])[:count]
    out = limbs(0, 8 * count)
    unit.k1t_sc_batch_inv(count, limbs(sum(x << (256 * i) for i, x in enumerate(xs)), 8 * count), out)
    assert [value(out, 8 * i) for i in range(count)] == [pow(x, -1, N) * R_MONT % N for x in xs]


def test_chunked_kernel_matches_the_one_item_verify(unit):
    """The kernel's block chunks (shared scalar inversion, invalid signatures given s = 1)
    give the verdicts of the one-item path across chunk boundaries, with a partial last
    chunk and malformed signatures (s = 0, s ≥ n, high s) interleaved."""
    kas = kat.generate("secp256k1", 420, 0, seed=23)  # about a third prehashed, left out
    items = []
    for i, ka in enumerate(kas):
        pk, msg, sig = ka.item.public_key, ka.item.message, ka.item.signature
        if not ka.item.prehashed:
            if i % 7 == 1:
                sig = sig[:32] + bytes(32)
            elif i % 7 == 2:
                sig = sig[:32] + N.to_bytes(32, "big")
            elif i % 7 == 3:
                sig = sig[:32] + (N - int.from_bytes(sig[32:], "big")).to_bytes(32, "big")
            items.append((pk, msg, sig))
    one = [bool(unit.k1t_verify_one(pk, len(pk), sig, len(sig), msg, ctypes.c_uint64(len(msg)), 0))
           for pk, msg, sig in items]
    assert kernel_verify(items) == one
    assert 0 < sum(one) < len(one) and len(items) > 256


def test_scalar_decoding_flags_overflow_and_reduces_digests(unit):
    for v in (0, 1, N - 1, N, N + 1, 2**256 - 1):
        raw = int.from_bytes(v.to_bytes(32, "big"), "little")
        ret, (got,) = sc_op(unit, 7, raw)
        assert ret == (v >= N)
        if v < N:
            assert got == v
        _, (got,) = sc_op(unit, 8, raw)
        assert got == v % N


def test_glv_split_is_exact_and_short(unit):
    lam, _, basis, g = gen.glv_constants()
    rng = random.Random(14)
    ks = [0, 1, 2, N - 1, N // 2, lam, N - lam, 2**128, 2**255 % N] + [rng.randrange(N) for _ in range(300)]
    for k in ks:
        _, (k1, k2) = sc_op(unit, 6, k, out_limbs=16)
        assert (k1, k2) == gen.glv_split(k, lam, basis, g)
        assert (k1 + k2 * lam) % N == k
        assert gen.signed_magnitude(k1) < 2**128 and gen.signed_magnitude(k2) < 2**128


def test_point_addition_cases(unit):
    rng = random.Random(15)
    p1 = gen.mul(rng.randrange(1, N), G)
    p2 = gen.mul(rng.randrange(1, N), G)
    neg1 = (p1[0], P - p1[1])
    cases = [(p1, p2, gen.add(p1, p2)), (p1, p1, gen.add(p1, p1)), (neg1, p1, None), (None, p2, p2)]
    for a, b, want in cases:
        for z in (1, 2, rng.randrange(1, P)):
            out = limbs(0, 25)
            unit.k1t_gej_add_ge(gej(a, z), ge(b), out)
            assert affine(out) == want
    for a in (p1, p2, None):
        out = limbs(0, 25)
        unit.k1t_gej_double(gej(a, 7), out)
        assert affine(out) == gen.add(a, a)


def test_odd_multiples_table(unit):
    q = gen.mul(0xC0FFEE, G)
    out = limbs(0, 16 * 8)
    unit.k1t_odd_multiples(ge(q), out)
    for i in range(8):
        assert (value(out, 16 * i), value(out, 16 * i + 8)) == gen.mul(2 * i + 1, q)


def test_double_base_multiplication(unit):
    lam = gen.glv_constants()[0]
    rng = random.Random(16)
    bases = [G, (G[0], P - G[1]), gen.mul(2**128, G), gen.mul(lam, G), gen.mul(rng.randrange(N), G)]
    scalars = [0, 1, 2, 3, N - 1, N - 2, 2**128 - 1, 2**128, lam, N - lam, rng.randrange(N)]
    for q in bases:
        for u1 in scalars[::2] + [rng.randrange(N)]:
            for u2 in scalars[1::2]:
                out = limbs(0, 25)
                unit.k1t_ecmult(ge(q), limbs(u1), limbs(u2), out)
                assert affine(out) == gen.add(gen.mul(u1, G), gen.mul(u2, q)), (u1, u2)
    # u1·G + u2·Q = ∞ (u1 = −u2·d) ends in an addition of a point and its negation.
    for d, u2 in ((1, 5), (2**128, 12345), (rng.randrange(N), rng.randrange(1, N))):
        out = limbs(0, 25)
        unit.k1t_ecmult(ge(gen.mul(d, G)), limbs(-u2 * d % N), limbs(u2), out)
        assert out[24] == 1


# ------------------------------------------------------------------ Wycheproof
def wycheproof_cases(name: str):
    path = VECTORS / "wycheproof" / "testvectors_v1" / name
    if not path.is_file():
        vectors_missing(str(path))
    return [from_json(d) for d in convert_all(VECTORS) if d["source"] == f"wycheproof/{name}"]


def test_wycheproof_keys_in_every_encoding():
    """The Wycheproof items again with each key compressed and as hybrid keys of both parities."""
    cases = wycheproof_cases("ecdsa_secp256k1_sha256_bitcoin_test.json")
    by_key: dict[bytes, list] = {}
    for ka in cases:
        by_key.setdefault(ka.item.public_key, []).append(ka)
    items, names = [], []
    for pk, kas in by_key.items():
        x, y = pk[1:33], pk[33:]
        parity = y[-1] & 1
        encodings = {"compressed": bytes([2 | parity]) + x, "hybrid": bytes([6 | parity]) + x + y,
                     "hybrid-wrong-parity": bytes([7 - parity]) + x + y,
                     "compressed-wrong-parity": bytes([3 - parity]) + x}
        for label, enc in encodings.items():
            for ka in kas[:6]:
                items.append((enc, ka.item.message, ka.item.signature))
                names.append(f"tcId {ka.id} {label}")
    want = assert_agrees(items, names=names)
    assert any(want) and not all(want)


# ------------------------------------------------------------------ generated items
def test_generated_sample_agrees():
    kas = kat.generate("secp256k1", 60, 60, seed=7)
    for prehashed in (False, True):
        sel = [ka for ka in kas if ka.item.prehashed == prehashed]
        items = [(ka.item.public_key, ka.item.message, ka.item.signature) for ka in sel]
        want = assert_agrees(items, prehashed=prehashed, names=[ka.id for ka in sel])
        assert want == [ka.expected for ka in sel]
        high = [(pk, m, sig[:32] + (N - int.from_bytes(sig[32:], "big")).to_bytes(32, "big"))
                for pk, m, sig in items]
        assert_agrees(high, prehashed=prehashed)
        assert_agrees(high, prehashed=prehashed, allow_high_s=True)


# ------------------------------------------------------------------ targeted cases
def forge(k: int, s: int, z: int) -> tuple[bytes, bytes]:
    """A key and signature (r, s) valid for digest z with nonce point k·G: d = (s·k − z)/r."""
    r = gen.mul(k, G)[0] % N
    d = (s * k - z) * pow(r, -1, N) % N
    return point_bytes(gen.mul(d, G)), i2b(r) + i2b(s)


def x_at_least_n_case() -> tuple[bytes, bytes, bytes, int]:
    """pk, digest, sig with x(R) ≥ n, so r = x(R) − n (SEC 1 §4.1.4 step 7's reduction)."""
    x = N + 1  # r = x − n must be nonzero
    while pow((x**3 + 7) % P, (P - 1) // 2, P) != 1:
        x += 1
    assert x < P
    y = pow((x**3 + 7) % P, (P + 1) // 4, P)
    rpt = (x, y)
    r, s, z = x - N, 0x1234567, 0xABCDEF
    # R = (z·G + r·Q)/s  =>  Q = (s·R − z·G)/r.
    q = gen.mul(pow(r, -1, N), gen.add(gen.mul(s, rpt), gen.mul(N - z, G)))
    return point_bytes(q), i2b(z), i2b(r) + i2b(s), x


def targeted_cases() -> list[tuple[str, bytes, bytes, bytes, bool, bool]]:
    """(name, pk, msg, sig, prehashed, allow_high_s)."""
    out = []
    d = 0x5EED1234
    q = gen.mul(d, G)
    msg = b"zapverify targeted case"
    digest = hashlib.sha256(msg).digest()
    r, s = sign_digest(d, digest)
    sig = i2b(r) + i2b(s)
    pkc, pku = point_bytes(q), point_bytes(q, False)
    hyb = bytes([6 | (q[1] & 1)]) + pku[1:]
    for hs in (False, True):
        out += [("valid compressed", pkc, msg, sig, False, hs), ("valid uncompressed", pku, msg, sig, False, hs),
                ("hybrid right parity", hyb, msg, sig, False, hs),
                ("hybrid wrong parity", bytes([hyb[0] ^ 1]) + hyb[1:], msg, sig, False, hs),
                ("high S", pkc, msg, i2b(r) + i2b(N - s), False, hs)]
    # r and s out of range.
    for name, rr, ss in (("r = 0", 0, s), ("s = 0", r, 0), ("r = n", N, s), ("s = n", r, N),
                         ("r = n + 1", N + 1, s), ("s = 2^256 - 1", r, 2**256 - 1), ("r = p", P, s),
                         ("r = n - 1", N - 1, s), ("s = n - 1", r, N - 1), ("r + n", min(r + N, 2**256 - 1), s)):
        for hs in (False, True):
            out.append((name, pkc, msg, i2b(rr) + i2b(ss), False, hs))
    # s exactly at and just above n/2 on forged valid signatures.
    for label, sv in (("s = n/2 (low)", N // 2), ("s = n/2 + 1 (high)", N // 2 + 1)):
        pk_f, sig_f = forge(0x777, sv, 0x4242)
        for hs in (False, True):
            out.append((label, pk_f, i2b(0x4242), sig_f, True, hs))
    # Keys: off the curve, coordinates ≥ p, no square root, bad prefixes and lengths.
    x_nosqrt = next(x for x in range(1, 100) if pow((x**3 + 7) % P, (P - 1) // 2, P) == P - 1)
    bad_keys = {
        "off-curve y + 1": b"\x04" + i2b(q[0]) + i2b((q[1] + 1) % P),
        "x = p (65)": b"\x04" + i2b(P) + pku[33:], "y = p": b"\x04" + pku[1:33] + i2b(P),
        "x = p (33)": b"\x02" + i2b(P), "x = 2^256 - 1": b"\x03" + i2b(2**256 - 1),
        "x = p + 1": b"\x02" + i2b(P + 1),
        "x with no y": b"\x02" + i2b(x_nosqrt), "x = 0": b"\x02" + i2b(0),
        "all-zero 65": bytes(65), "all-zero 33": bytes(33),
        "prefix 0x04 at 33": b"\x04" + pkc[1:], "prefix 0x02 at 65": b"\x02" + pku[1:],
        "prefix 0x05": b"\x05" + pku[1:], "prefix 0x00": b"\x00" + pkc[1:], "prefix 0x01": b"\x01" + pkc[1:],
        "prefix 0xff": b"\xff" + pku[1:], "prefix 0x08": b"\x08" + pku[1:],
        "length 32": pkc[1:], "length 34": pkc + b"\0", "length 64": pku[1:], "length 66": pku + b"\0",
        "length 0": b"",
    }
    for name, pk in bad_keys.items():
        out.append((name, pk, msg, sig, False, False))
    # Messages: prehashed lengths and SHA-256 padding boundaries.
    rp, sp = sign_digest(d, digest)
    for ln in (31, 32, 33):
        out.append((f"prehashed {ln} bytes", pkc, digest[:ln] + bytes(max(0, ln - 32)), i2b(rp) + i2b(sp), True, False))
    for ln in (0, 1, 55, 56, 63, 64, 65, 119, 120, 200):
        m = bytes(range(256))[:ln]
        rr, ss = sign_digest(d, hashlib.sha256(m).digest())
        out.append((f"message {ln} bytes", pkc, m, i2b(rr) + i2b(ss), False, False))
    # Digests that reduce mod n (z = 0 makes u1 = 0) and a digest giving R = ∞.
    for label, z in (("digest 0", 0), ("digest n", N), ("digest 2^256 - 1", 2**256 - 1), ("digest n - 1", N - 1)):
        rr, ss = sign_digest(d, i2b(z))
        out.append((label, pkc, i2b(z), i2b(rr) + i2b(ss), True, False))
    r_inf = 0x1111
    s_inf = 0x2222
    out.append(("R at infinity", pkc, i2b(-r_inf * d % N), i2b(r_inf) + i2b(s_inf), True, False))
    # Keys G, −G and 2^128·G (points of the fixed-base tables).
    for label, dd in (("key G", 1), ("key -G", N - 1), ("key 2^128 G", 2**128)):
        rr, ss = sign_digest(dd, digest)
        out.append((label, point_bytes(gen.mul(dd, G)), msg, i2b(rr) + i2b(ss), False, False))
    # x(R) ≥ n: r = x − n verifies; r = x itself is out of range.
    pk_x, z_x, sig_x, x = x_at_least_n_case()
    out.append(("x(R) >= n, r = x - n", pk_x, z_x, sig_x, True, False))
    out.append(("x(R) >= n, r = x", pk_x, z_x, i2b(x) + sig_x[32:], True, False))
    out.append(("x(R) >= n, uncompressed", point_bytes(_decompress(pk_x), False), z_x, sig_x, True, False))
    # Signature lengths other than 64.
    out.append(("sig 63 bytes", pkc, msg, sig[:63], False, False))
    out.append(("sig 65 bytes", pkc, msg, sig + b"\0", False, False))
    return out


def _decompress(pk: bytes):
    x = int.from_bytes(pk[1:], "big")
    y = pow((x**3 + 7) % P, (P + 1) // 4, P)
    if (y & 1) != (pk[0] & 1):
        y = P - y
    return x, y


def test_targeted_cases_agree():
    cases = targeted_cases()
    groups: dict[tuple[bool, bool], list] = {}
    for c in cases:
        groups.setdefault((c[4], c[5]), []).append(c)
    verdicts = {}
    for (prehashed, hs), cs in groups.items():
        want = assert_agrees([(c[1], c[2], c[3]) for c in cs], prehashed=prehashed, allow_high_s=hs,
                             names=[c[0] for c in cs])
        for c, v in zip(cs, want):
            verdicts[(c[0], hs)] = v
    # The cases mean what their names say (the reference confirms the construction).
    expect_true = ["valid compressed", "valid uncompressed", "hybrid right parity", "s = n/2 (low)",
                   "prehashed 32 bytes", "message 0 bytes", "message 64 bytes", "digest 0", "digest n",
                   "digest 2^256 - 1", "key G", "key -G", "key 2^128 G", "x(R) >= n, r = x - n",
                   "x(R) >= n, uncompressed"]
    for name in expect_true:
        assert verdicts[(name, False)], name
    assert verdicts[("high S", True)] and not verdicts[("high S", False)]
    assert verdicts[("s = n/2 + 1 (high)", True)] and not verdicts[("s = n/2 + 1 (high)", False)]
    for name in ("hybrid wrong parity", "r = 0", "s = 0", "r = n", "s = n", "r + n", "off-curve y + 1",
                 "x = p (33)", "x with no y", "prehashed 31 bytes", "prehashed 33 bytes", "R at infinity",
                 "x(R) >= n, r = x", "sig 63 bytes", "length 34"):
        assert not verdicts[(name, False)], name


# ------------------------------------------------------------------ the GPU build
def test_ptxas_report_keeps_the_entry_frame_apart_from_out_of_line_functions():
    from app.engine.device import ptxas

    log = """ptxas info    : Compiling entry function 'zv_verify_secp256k1' for 'sm_90'
ptxas info    : Function properties for zv_verify_secp256k1
    2448 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 142 registers, used 0 barriers, 2448 bytes cumulative stack size
ptxas info    : Function properties for _Z13k1_gej_doubleP6k1_gejPKS_
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads"""
    [e] = ptxas.parse(log)
    assert (e.registers, e.stack_bytes, e.spill_store_bytes, e.spill_load_bytes) == (142, 2448, 0, 0)


def test_ptxas_report_keeps_the_register_cap_and_spill_budget():
    """sm_90 resources of zv_verify_secp256k1, from bench/results/kernels_ptxas.txt (written by
    scripts/ptxas; tests/test_kernels_nvcc.py checks it describes these sources): the
    168-register cap of secp256k1.cu and at most 64 bytes spilled (36 B stores, 40 B loads
    when the report was made), outside the field arithmetic's hot loop."""
    from pathlib import Path

    report = Path(__file__).resolve().parents[1] / "bench" / "results" / "kernels_ptxas.txt"
    rows = [line.split() for line in report.read_text().splitlines() if " zv_verify_secp256k1 " in f" {line} "]
    [[_, _, regs, _, spill_st, spill_ld]] = rows
    assert 0 < int(regs) <= 168
    assert int(spill_st) <= 64 and int(spill_ld) <= 64
