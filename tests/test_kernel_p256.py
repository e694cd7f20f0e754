"""The P-256 ECDSA kernel (app/engine/kernels/schemes/p256.cu), host build, against OpenSSL
through ``cryptography`` (app/engine/reference/reference.py verify_p256): what is P-256's own.

The Wycheproof keys compressed, a generated sample and targeted edge cases (x(R) ≥ n, R = ∞,
u1 = 0, r/s at the bounds, keys off the curve or with coordinates ≥ p, hybrid keys, low_s).
What both ECDSA kernels are tested for alike (the Wycheproof files, the agreement suite at CI
size, malformed offsets, the generated tables) is tests/test_kernel_ecdsa.py.  Every test also
checks that no ZV_CHECK bound failed in the kernel.
"""

from __future__ import annotations

import hashlib

import pytest

from app.engine.device import hostbuild
from app.engine.reference import kat
from app.vectors import convert_all, from_json
from tests.conftest import VECTORS, vectors_missing
from tests.ecdsa_kernel import P256, i2b, point_bytes

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler for the host build")


gen, agreement, sign_digest = P256.gen, P256.agreement, P256.sign_digest
P, N, G, CURVE = gen.P, gen.N, gen.G, gen.CURVE


@pytest.fixture(autouse=True)
def _limb_bounds_hold():
    """Every test also checks the documented bounds (ZV_CHECK) held in the kernel."""
    yield
    assert hostbuild.verify_failures(hostbuild.load("p256")) == 0, "a ZV_CHECK bound failed in the P-256 kernel"


def assert_agrees(items, *, prehashed=False, low_s=False, names=None) -> list[bool]:
    """Kernel verdicts equal the reference's for (pk, msg, sig) items; returns the verdicts."""
    return P256.assert_agrees(items, prehashed=prehashed, flag=low_s, names=names)


# ------------------------------------------------------------------ Wycheproof
@pytest.mark.parametrize("name", sorted(P256.wycheproof))
def test_wycheproof_keys_compressed(name):
    """The files' keys compressed verify as the uncompressed ones do (the files give
    uncompressed keys only; tests/test_kernel_ecdsa.py checks them as given)."""
    path = VECTORS / "wycheproof" / "testvectors_v1" / name
    if not path.is_file():
        vectors_missing(str(path))
    cases = [from_json(d) for d in convert_all(VECTORS) if d["source"] == f"wycheproof/{name}"]
    items = [(ka.item.public_key, ka.item.message, ka.item.signature) for ka in cases]
    comp = [(bytes([2 | (pk[-1] & 1)]) + pk[1:33] if len(pk) == 65 and pk[0] == 4 else pk, m, s)
            for pk, m, s in items]
    assert assert_agrees(comp) == [ka.expected for ka in cases]


# ------------------------------------------------------------------ generated items
def test_generated_sample_agrees():
    kas = kat.generate("p256", 80, 80, seed=7)
    groups: dict[tuple[bool, bool], list] = {}
    for ka in kas:
        groups.setdefault((ka.item.prehashed, ka.item.low_s), []).append(ka)
    for (pre, low), group in groups.items():
        got = agreement.kernel_verify([(k.item.public_key, k.item.message, k.item.signature) for k in group],
                                      prehashed=pre, low_s=low)
        assert got == [k.expected for k in group]


# ------------------------------------------------------------------ targeted cases
def forge(rpt, r: int, s: int, z: int) -> bytes:
    """The key Q for which (r, s) signs digest z with R = rpt: R = (z·G + r·Q)/s, so
    Q = (s·R − z·G)/r."""
    q = CURVE.mul(pow(r, -1, N), CURVE.add(CURVE.mul(s, rpt), CURVE.mul(N - z % N, G)))
    return point_bytes(q)


def x_at_least_n_point():
    """A point R with x(R) ∈ [n, p), so r = x − n (SEC 1 §4.1.4 step 7's reduction)."""
    x = N + 1
    while pow((x**3 - 3 * x + gen.B) % P, (P - 1) // 2, P) != 1:
        x += 1
    assert x < P
    return x, pow((x**3 - 3 * x + gen.B) % P, (P + 1) // 4, P)


def targeted_cases() -> list[tuple[str, bytes, bytes, bytes, bool, bool]]:
    """(name, pk, msg, sig, prehashed, low_s)."""
    out = []
    d = 0x5EED1234
    q = CURVE.mul(d, G)
    msg = b"zapverify targeted case"
    digest = hashlib.sha256(msg).digest()
    r, s = sign_digest(d, digest)
    s_low, s_high = min(s, N - s), max(s, N - s)
    pkc, pku = point_bytes(q), point_bytes(q, False)
    for low in (False, True):
        out += [("valid compressed", pkc, msg, i2b(r) + i2b(s_low), False, low),
                ("valid uncompressed", pku, msg, i2b(r) + i2b(s_low), False, low),
                ("high S", pkc, msg, i2b(r) + i2b(s_high), False, low),
                ("hybrid right parity", bytes([6 | (q[1] & 1)]) + pku[1:], msg, i2b(r) + i2b(s_low), False, low)]
    sig = i2b(r) + i2b(s)
    for name, rr, ss in (("r = 0", 0, s), ("s = 0", r, 0), ("r = n", N, s), ("s = n", r, N),
                         ("r = n + 1", N + 1, s), ("s = 2^256 - 1", r, 2**256 - 1), ("r = p", P, s),
                         ("r = n - 1", N - 1, s), ("s = n - 1", r, N - 1), ("r + n", min(r + N, 2**256 - 1), s)):
        out.append((name, pkc, msg, i2b(rr) + i2b(ss), False, False))
    # s exactly at and just above n/2, on forged valid signatures.
    rpt = CURVE.mul(0x777, G)
    for label, sv in (("s = n/2 (low)", N // 2), ("s = n/2 + 1 (high)", N // 2 + 1)):
        for low in (False, True):
            out.append((label, forge(rpt, rpt[0] % N, sv, 0x4242), i2b(0x4242), i2b(rpt[0] % N) + i2b(sv), True, low))
    # Keys: off the curve, coordinates ≥ p, no square root, the point at infinity, bad prefixes and lengths.
    x_nosqrt = next(x for x in range(1, 100) if pow((x**3 - 3 * x + gen.B) % P, (P - 1) // 2, P) == P - 1)
    bad_keys = {
        "off-curve y + 1": b"\x04" + i2b(q[0]) + i2b((q[1] + 1) % P),
        "x = p (65)": b"\x04" + i2b(P) + pku[33:], "y = p": b"\x04" + pku[1:33] + i2b(P),
        "y + p": b"\x04" + pku[1:33] + i2b(q[1] + P) if q[1] + P < 2**256 else b"\x04" + pku[1:33] + i2b(P + 1),
        "x = p (33)": b"\x02" + i2b(P), "x = 2^256 - 1": b"\x03" + i2b(2**256 - 1),
        "x with no y": b"\x02" + i2b(x_nosqrt), "infinity 1 byte": b"\x00", "all-zero 65": bytes(65),
        "all-zero 33": bytes(33), "prefix 0x04 at 33": b"\x04" + pkc[1:], "prefix 0x02 at 65": b"\x02" + pku[1:],
        "hybrid wrong parity": bytes([7 - (q[1] & 1)]) + pku[1:], "prefix 0x05": b"\x05" + pku[1:],
        "length 32": pkc[1:], "length 66": pku + b"\0", "length 0": b"",
    }
    for name, pk in bad_keys.items():
        out.append((name, pk, msg, sig, False, False))
    # Messages: prehashed lengths and SHA-256 padding boundaries.
    for ln in (31, 32, 33):
        out.append((f"prehashed {ln} bytes", pkc, digest[:ln] + bytes(max(0, ln - 32)), sig, True, False))
    for ln in (0, 55, 56, 64, 119, 200):
        m = bytes(range(256))[:ln]
        rr, ss = sign_digest(d, hashlib.sha256(m).digest())
        out.append((f"message {ln} bytes", pkc, m, i2b(rr) + i2b(ss), False, False))
    # Digests that reduce mod n (e = 0 makes u1 = 0), and R = ∞ (u1·G = −u2·Q).
    for label, z in (("digest 0", 0), ("digest n", N), ("digest 2^256 - 1", 2**256 - 1)):
        rr, ss = sign_digest(d, i2b(z))
        out.append((label, pkc, i2b(z), i2b(rr) + i2b(ss), True, False))
    out.append(("R at infinity", pkc, i2b(-0x1111 * d % N), i2b(0x1111) + i2b(0x2222), True, False))
    # Keys G and −G (entries of the fixed-base table: u1·G + u2·Q doubles or cancels).
    for label, dd in (("key G", 1), ("key -G", N - 1)):
        rr, ss = sign_digest(dd, digest)
        out.append((label, point_bytes(CURVE.mul(dd, G)), msg, i2b(rr) + i2b(ss), False, False))
    # x(R) ≥ n: r = x − n verifies (r + n < p); r = x itself is out of range.
    x, y = x_at_least_n_point()
    rx, sx, zx = x - N, 0x1234567, 0xABCDEF
    pk_x = forge((x, y), rx, sx, zx)
    out.append(("x(R) >= n, r = x - n", pk_x, i2b(zx), i2b(rx) + i2b(sx), True, False))
    out.append(("x(R) >= n, r = x", pk_x, i2b(zx), i2b(x) + i2b(sx), True, False))
    out.append(("sig 63 bytes", pkc, msg, sig[:63], False, False))
    out.append(("sig 65 bytes", pkc, msg, sig + b"\0", False, False))
    return out


def test_targeted_cases_agree():
    cases = targeted_cases()
    groups: dict[tuple[bool, bool], list] = {}
    for c in cases:
        groups.setdefault((c[4], c[5]), []).append(c)
    verdicts = {}
    for (prehashed, low), cs in groups.items():
        want = assert_agrees([(c[1], c[2], c[3]) for c in cs], prehashed=prehashed, low_s=low,
                             names=[c[0] for c in cs])
        for c, v in zip(cs, want):
            verdicts[(c[0], low)] = v
    # The cases mean what their names say (the reference confirms the construction).
    for name in ("valid compressed", "valid uncompressed", "high S", "s = n/2 (low)", "s = n/2 + 1 (high)",
                 "prehashed 32 bytes", "message 0 bytes", "message 64 bytes", "digest 0", "digest n",
                 "digest 2^256 - 1", "key G", "key -G", "x(R) >= n, r = x - n"):
        assert verdicts[(name, False)], name
    assert not verdicts[("high S", True)] and not verdicts[("s = n/2 + 1 (high)", True)]
    assert verdicts[("s = n/2 (low)", True)] and verdicts[("valid compressed", True)]
    for name in ("hybrid right parity", "hybrid wrong parity", "r = 0", "s = 0", "r = n", "s = n", "r + n",
                 "off-curve y + 1", "x = p (33)", "y + p", "x with no y", "infinity 1 byte", "prehashed 31 bytes",
                 "prehashed 33 bytes", "R at infinity", "x(R) >= n, r = x", "sig 63 bytes", "length 66"):
        assert not verdicts[(name, False)], name
