"""The Ed25519 kernel (app/engine/kernels/schemes/ed25519.cu), host build, against libsodium.

Every verdict is compared with :func:`app.engine.reference.reference.verify_ed25519` (libsodium via
pynacl); the field, scalar and group layers are also checked one by one against Python
integers and the pure-Python model.  ``scripts/agreement --scheme ed25519`` runs the same
comparison on >= 100k valid and >= 100k mutated items; this file runs a CI-sized sample.
The sm_90 build is checked with the other kernels by tests/test_kernels_nvcc.py.
"""

from __future__ import annotations

import ctypes
import json
import random
import subprocess
import sys
from dataclasses import replace

import nacl.signing
import numpy as np
import pytest

from app.core.batch import Item
from app.engine.device import hostbuild
from app.engine.reference import kat, reference
from tests.conftest import ROOT
from tests.oracles import ed25519_model as m

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def lib():
    return hostbuild.load("ed25519")


@pytest.fixture(autouse=True)
def _limb_bounds_hold(lib):
    """Every test also checks fe25519.cuh's documented limb bounds (ZV_CHECK, counted in
    the verify host build the suite runs): none may have failed after the test."""
    yield
    assert hostbuild.verify_failures(lib) == 0, "a ZV_CHECK limb bound failed in the Ed25519 kernel"


def kernel_verdicts(lib, items: list[Item]) -> list[bool]:
    """Run zv_verify_ed25519 over ``items``, one call per (pk length, sig length) group."""
    out: list[bool | None] = [None] * len(items)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault((len(it.public_key), len(it.signature)), []).append(i)
    for (pk_len, sig_len), idx in groups.items():
        pks = np.frombuffer(b"".join(items[i].public_key for i in idx) + b"\0", np.uint8)
        sigs = np.frombuffer(b"".join(items[i].signature for i in idx) + b"\0", np.uint8)
        msgs = np.frombuffer(b"".join(items[i].message for i in idx) + b"\0", np.uint8)
        offsets = np.zeros(len(idx) + 1, np.uint64)
        offsets[1:] = np.cumsum([len(items[i].message) for i in idx])
        verdicts = np.full(len(idx), 7, np.uint8)
        lib.zv_verify_ed25519(
            ctypes.c_void_p(pks.ctypes.data), ctypes.c_uint32(pk_len),
            ctypes.c_void_p(sigs.ctypes.data), ctypes.c_uint32(sig_len),
            ctypes.c_void_p(msgs.ctypes.data), ctypes.c_void_p(offsets.ctypes.data),
            ctypes.c_void_p(None), ctypes.c_uint32(0), ctypes.c_uint32(0),
            ctypes.c_uint64(len(idx)), ctypes.c_void_p(verdicts.ctypes.data))
        assert set(verdicts.tolist()) <= {0, 1}
        for j, i in enumerate(idx):
            out[i] = bool(verdicts[j])
    return out  # type: ignore[return-value]


def reference_verdicts(items: list[Item]) -> list[bool]:
    return [reference.verify_ed25519(it.public_key, it.message, it.signature) for it in items]


def assert_agrees(lib, items: list[Item], expect: bool | None = None) -> list[bool]:
    got, want = kernel_verdicts(lib, items), reference_verdicts(items)
    bad = [(i, items[i].public_key.hex(), items[i].signature.hex(), want[i], got[i])
           for i in range(len(items)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} disagreements with libsodium, first: {bad[:3]}"
    if expect is not None:
        assert all(v == expect for v in want), "the case does not test what it says"
    return got


def signed(msg: bytes, seed: int = 7) -> Item:
    sk = nacl.signing.SigningKey(bytes([seed]) * 32)
    return Item("ed25519", sk.verify_key.encode(), msg, sk.sign(msg).signature)


# ------------------------------------------------------------------ the generated header
def test_constant_tables_are_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_ed25519_tables"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_small_order_blocklist_is_libsodiums():
    # libsodium's list (ed25519_ref10.c, ge25519_has_small_order): y = 0, 1, p - 1, p, p + 1
    # and the two y of the order-8 points.
    ys = {int.from_bytes(e, "little") for e in m.small_order_encodings()}
    y8 = 2707385501144840649318225287225658788936804267575313519463743609750303402022
    assert ys == {0, 1, m.P - 1, m.P, m.P + 1, y8, m.P - y8}


# ------------------------------------------------------------------ layers
FE_OPS = {"add": (0, lambda a, b: a + b), "sub": (1, lambda a, b: a - b), "mul": (2, lambda a, b: a * b),
          "sq": (3, lambda a, b: a * a), "invert": (4, lambda a, b: pow(a, m.P - 2, m.P)),
          "pow22523": (5, lambda a, b: pow(a, (m.P - 5) // 8, m.P)), "canonical": (6, lambda a, b: a)}
EDGE = [0, 1, 2, 19, 37, 38, m.P - 1, m.P, m.P + 1, 2 * m.P - 1, 2 * m.P, 2**255 - 1, 2**255,
        2**255 + 18, 2**255 + 19, 2**256 - 39, 2**256 - 38, 2**256 - 1]


@pytest.mark.parametrize("op", FE_OPS)
def test_field_operations_match_integers(lib, op):
    code, fn = FE_OPS[op]
    rng = random.Random(op)
    values = EDGE + [rng.getrandbits(256) for _ in range(40 if op in ("invert", "pow22523") else 400)]
    out = ctypes.create_string_buffer(32)
    for a in values:
        for b in (EDGE if op in ("add", "sub", "mul") else [0]) + [rng.getrandbits(256)]:
            lib.zv_ed25519_hook_fe(code, out, a.to_bytes(32, "little"), b.to_bytes(32, "little"))
            assert int.from_bytes(out.raw, "little") == fn(a, b) % m.P, (op, hex(a), hex(b))


@pytest.mark.parametrize("count", [1, 2, 127, 128, 256])
def test_batched_inversion_inverts_every_value(lib, count):
    """zv_ed_fe_batch_invert (the kernel's one inversion per block chunk) gives each value's
    own inverse, for values in the weakly reduced range [1, 2^256) as the kernel holds them."""
    rng = random.Random(count)
    values = [v for v in [1, 2, m.P - 1, m.P + 1, 2**256 - 1] + [rng.getrandbits(256) for _ in range(count)]
              if v % m.P][:count]
    out = ctypes.create_string_buffer(32 * count)
    lib.zv_ed25519_hook_batch_invert(count, out, b"".join(v.to_bytes(32, "little") for v in values))
    got = [int.from_bytes(out.raw[32 * i:32 * i + 32], "little") for i in range(count)]
    assert got == [pow(v, m.P - 2, m.P) for v in values]


def test_chunked_kernel_matches_the_one_item_verify(lib):
    """The kernel's block chunks (shared inversion, invalid items dropped from it) give the
    verdicts of the one-item path on a sample across chunk boundaries, with a partial
    last chunk and invalid items interleaved."""
    items = [ka.item for ka in kat.generate("ed25519", 300, 0, seed=41)]
    rng = random.Random(12)
    items = [m.mutant(it, m.MUTANT_KINDS[i % len(m.MUTANT_KINDS)], rng) if i % 3 == 0 else it
             for i, it in enumerate(items)]
    one = [bool(lib.zv_ed25519_hook_verify_one(it.public_key, 32, it.signature, 64, it.message,
                                               ctypes.c_uint64(len(it.message)))) for it in items]
    assert kernel_verdicts(lib, items) == one
    assert 0 < sum(one) < len(one)


def test_scalar_reduction_mod_l(lib):
    rng = random.Random(5)
    out = ctypes.create_string_buffer(32)
    for x in [0, 1, m.L - 1, m.L, m.L + 1, 2 * m.L, 3 * m.L - 1, m.L * m.L, 2**512 - 1, 2**253, 2**256] + \
             [rng.getrandbits(512) for _ in range(500)]:
        lib.zv_ed25519_hook_sc_reduce(out, x.to_bytes(64, "little"))
        assert int.from_bytes(out.raw, "little") == x % m.L, hex(x)


def test_double_scalar_multiplication_matches_model(lib):
    rng = random.Random(9)
    torsion = m.torsion8()
    out = ctypes.create_string_buffer(32)
    scalars = [(0, 0), (1, 0), (0, 1), (m.L - 1, m.L - 1), (2**253 - 1, 2**253 - 1)]
    for t in range(12):
        a_pt = m.mul(rng.randrange(1, m.L), m.B)
        if t % 3 == 0:
            a_pt = m.add(a_pt, torsion[t % 8])  # mixed order: [k] acts on the torsion part too
        k, s = scalars[t] if t < len(scalars) else (rng.randrange(m.L), rng.randrange(m.L))
        assert lib.zv_ed25519_hook_dsm(out, k.to_bytes(32, "little"), m.encode(a_pt), s.to_bytes(32, "little"))
        assert out.raw == m.encode(m.add(m.mul(-k, a_pt), m.mul(s, m.B))), t


def test_decoding_fails_off_curve(lib):
    rng = random.Random(2)
    out = ctypes.create_string_buffer(32)
    for _ in range(20):
        y = m.off_curve_y(rng)
        assert lib.zv_ed25519_hook_dsm(out, bytes(32), y.to_bytes(32, "little"), bytes(32)) == 0


# ------------------------------------------------------------------ verdicts vs libsodium
def test_wycheproof_ed25519(lib, vectors_root):
    data = json.loads((vectors_root / "wycheproof" / "testvectors_v1" / "ed25519_test.json").read_text())
    items, expected = [], []
    for group in data["testGroups"]:
        pk = bytes.fromhex(group["publicKey"]["pk"])
        for t in group["tests"]:
            items.append(Item("ed25519", pk, bytes.fromhex(t["msg"]), bytes.fromhex(t["sig"])))
            expected.append(t["result"] == "valid")
    assert len(items) == data["numberOfTests"]
    got = assert_agrees(lib, items)
    assert got == expected  # the file and libsodium agree on every Ed25519 case


def test_generated_valid_and_mutated_sample(lib):
    items = []
    for seed in range(16):  # 16 keys x 64 messages; every mutant kind of every item
        items += [ka.item for ka in kat.generate("ed25519", 64, 0, seed=100 + seed)]
    rng = random.Random(11)
    mutated = [m.mutant(it, kind, rng) for it in items for kind in m.MUTANT_KINDS]
    got = assert_agrees(lib, items)
    assert all(got)
    assert not any(assert_agrees(lib, mutated))


def test_mixed_order_keys(lib):
    items = m.mixed_order_items(random.Random(3), 256)
    got = assert_agrees(lib, items)
    assert 0 < sum(got) < len(got)  # both verdicts occur, so k mod L (not mod 8L) matters


def test_s_at_and_above_l(lib):
    it = signed(b"scalar bounds")
    r, s = it.signature[:32], int.from_bytes(it.signature[32:], "little")
    cases = [replace(it, signature=r + v.to_bytes(32, "little"))
             for v in (m.L, m.L + 1, s + m.L, 2**252 + 2**251, 2**253, 2**255, 2**256 - 1)]
    assert_agrees(lib, cases, expect=False)
    assert_agrees(lib, [it], expect=True)


def test_small_order_a_and_r_every_encoding(lib):
    it = signed(b"small order")
    cases = []
    for enc in m.small_order_encodings():
        for sign in (0, 1):
            e = (int.from_bytes(enc, "little") | sign << 255).to_bytes(32, "little")
            cases.append(replace(it, public_key=e))
            cases.append(replace(it, signature=e + it.signature[32:]))
            # A = R = the same small-order point and S = 0: [0]B - [k]A is small order, and
            # for the identity it equals R, so only the blocklist rejects these.
            cases.append(Item("ed25519", e, b"m", e + bytes(32)))
    assert_agrees(lib, cases, expect=False)


def test_noncanonical_and_off_curve_a(lib):
    it = signed(b"encodings")
    rng = random.Random(4)
    keys = [(m.P + d).to_bytes(32, "little") for d in range(19)]            # y = p .. 2^255 - 1
    keys += [((m.P + d) | 1 << 255).to_bytes(32, "little") for d in range(0, 19, 3)]
    keys += [(m.off_curve_y(rng) | (i & 1) << 255).to_bytes(32, "little") for i in range(20)]
    assert_agrees(lib, [replace(it, public_key=k) for k in keys], expect=False)


def test_noncanonical_r_is_never_accepted(lib):
    # R = y + p for a small y names the same point as y; libsodium compares bytes, so it fails.
    it = signed(b"R bytes")
    cases = [replace(it, signature=(m.P + d).to_bytes(32, "little") + it.signature[32:]) for d in range(2, 19)]
    assert_agrees(lib, cases, expect=False)


def test_empty_and_long_messages(lib):
    # |R ‖ A ‖ M| = 64 + |M| around the SHA-512 padding edges (111/112, 127/128, 239/240 bytes)
    cases = [signed(b""), signed(bytes(range(256)) * 4096, seed=9)]
    cases += [signed(bytes([n]) * n, seed=n) for n in (47, 48, 63, 64, 175, 176)]
    assert_agrees(lib, cases, expect=True)
    assert_agrees(lib, [replace(c, message=c.message + b"!") for c in cases], expect=False)


def test_wrong_lengths_are_invalid_not_errors(lib):
    it = signed(b"lengths")
    cases = [replace(it, public_key=it.public_key + b"\0"), replace(it, public_key=it.public_key[:31]),
             replace(it, signature=it.signature + b"\0"), replace(it, signature=it.signature[:63])]
    assert kernel_verdicts(lib, cases) == [False] * 4
    assert reference_verdicts(cases) == [False] * 4
