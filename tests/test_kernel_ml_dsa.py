"""The ML-DSA kernels (app/engine/kernels/schemes/ml_dsa.cu), host build, against OpenSSL:
the thread kernel (one thread per signature) and the block kernel (one block of 128 per
signature, run by the host build as 128 fibers with real barriers), every test on both.

Every verdict is compared with the CPU backend's reference,
:func:`app.engine.reference.reference.make_verify_mldsa` (OpenSSL through ``cryptography``), on every
Wycheproof ML-DSA vector (read in place from ../shared/vectors; skipped where absent) and on
a CI-sized sample of generated valid items and adversarial mutations of them
(tests/oracles/ml_dsa_model.py).  The ring arithmetic, SampleInBall and UseHint are
also checked one by one against Python.  Every run asserts that no ZV_CHECK bound failed.
``scripts/agreement --scheme ml-dsa`` runs the same comparison on >= 100k valid and >= 100k mutated
items per parameter set; the sm_90 build is checked by tests/test_kernels_nvcc.py.
"""

from __future__ import annotations

import ctypes
import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from app.core.batch import Batch, Item
from app.core.schemes import SCHEMES
from app.engine.backends.kernel_host import KernelHostBackend
from app.engine.device import hostbuild
from app.engine.reference import kat
from tests.conftest import ROOT
from tests.oracles import ml_dsa_model as m
from tests.oracles.ml_dsa_model import buf as _buf
from tests.oracles.ml_dsa_model import kernel_verdicts

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")

LEVELS = (44, 65, 87)
KERNELS = ("thread", "block")


@pytest.fixture(scope="module")
def lib():
    lib = hostbuild.load("ml_dsa")
    assert hostbuild.verify_failures(lib) is not None, "the suite builds kernels with ZV_CHECK on"
    return lib


@pytest.fixture(autouse=True)
def no_bound_failures(lib):
    """Every test ends with zero failed ZV_CHECK bounds in the host build."""
    before = hostbuild.verify_failures(lib)
    yield
    assert hostbuild.verify_failures(lib) == before


@pytest.fixture(params=KERNELS)
def kernel(request) -> str:
    """Which of the two ML-DSA kernels a test runs."""
    return request.param


def assert_agrees(lib, items: list[Item], kernel: str) -> list[bool]:
    """The kernel's verdicts equal OpenSSL's on every item; returns them."""
    return m.assert_agrees_with_openssl(items, kernel_verdicts(lib, items, kernel))


def signed(level: int, count: int, seed: int = 0, context: bytes = b"", msg_len: int | None = None) -> list[Item]:
    return kat.sign_items(f"ml-dsa-{level}", count, seed=seed, context=context, msg_len=msg_len)


# ------------------------------------------------------------------ generated items
@pytest.mark.parametrize("level", LEVELS)
def test_valid_items_with_contexts_of_every_edge_length(lib, level, kernel):
    items = []
    for n, ctx_len in enumerate((0, 1, 254, 255)):
        items += signed(level, 2, seed=n, context=bytes(range(ctx_len)))
    items += signed(level, 2, seed=9, msg_len=0) + signed(level, 1, seed=10, msg_len=5000)
    assert all(assert_agrees(lib, items, kernel))


@pytest.mark.parametrize("level", LEVELS)
def test_context_of_256_bytes_and_wrong_contexts_are_false(lib, level, kernel):
    [it] = signed(level, 1, seed=1, context=bytes(255))
    items = [replace(it, context=bytes(256)), replace(it, context=bytes(254)), replace(it, context=b"")]
    assert assert_agrees(lib, items, kernel) == [False, False, False]


@pytest.mark.parametrize("level", LEVELS)
def test_wrong_lengths_are_false_and_read_nothing_past_the_item(lib, level, kernel):
    [it] = signed(level, 1, seed=2)
    items = [replace(it, public_key=it.public_key[:-1]), replace(it, public_key=it.public_key + b"\0"),
             replace(it, signature=it.signature[:-1]), replace(it, signature=it.signature + b"\0"),
             replace(it, public_key=b"", signature=b"")]
    assert assert_agrees(lib, items, kernel) == [False] * len(items)
    # Another set's sizes under this set's entry point.
    other = signed(44 if level != 44 else 65, 1, seed=2)[0]
    assert kernel_verdicts(lib, [replace(other, scheme=it.scheme)], kernel) == [False]


@pytest.mark.parametrize("level", LEVELS)
def test_every_mutant_kind_agrees_and_is_rejected(lib, level, kernel):
    rng = random.Random(f"ml-dsa-mutants/{level}")
    base = signed(level, 6, seed=3, context=b"zapverify") + signed(level, 6, seed=4)
    items, kinds = m.mutants(base, rng)
    got = assert_agrees(lib, items, kernel)
    accepted = [k for k, v in zip(kinds, got) if v]
    assert not accepted, f"mutants accepted: {accepted}"


@pytest.mark.parametrize("level", LEVELS)
def test_hint_encoding_checks_each_fail_on_their_own(lib, level, kernel):
    """Each malformed hint differs from a valid signature only in y, and is rejected even
    though the rest of the signature is correct; a well-formed moved hint is rejected by c̃."""
    p = m.PARAMS[level]
    [it] = signed(level, 1, seed=5)
    rng = random.Random(level)
    for kind in ("hint_unsorted", "hint_repeated", "hint_count_decreasing", "hint_count_over_omega",
                 "hint_padding", "hint_moved"):
        bad = m.mutant(it, kind, rng)
        assert bad.signature[:p.hint_offset] == it.signature[:p.hint_offset]
        assert bad.signature != it.signature
        assert assert_agrees(lib, [it, bad], kernel) == [True, False], kind


@pytest.mark.parametrize("level", LEVELS)
def test_z_norm_bound_is_exactly_gamma1_minus_beta(lib, level, kernel):
    p = m.PARAMS[level]
    [it] = signed(level, 1, seed=6)
    sig = it.signature
    # Re-encoding an unchanged coefficient is the identity (the layout is right).
    assert m.with_z_coefficient(sig, p, 1, 7, m.z_coefficient(sig, p, 1, 7)) == sig
    bound = p.gamma1 - p.beta
    for v in (bound - 1, bound, bound + 1, -(bound - 1), -bound, p.gamma1, -p.gamma1 + 1):
        bad = replace(it, signature=m.with_z_coefficient(sig, p, p.l - 1, 255, v))
        assert assert_agrees(lib, [bad], kernel) == [False], v


@pytest.mark.parametrize("level", LEVELS)
def test_random_bit_flips_sample(lib, level, kernel):
    rng = random.Random(f"flips/{level}")
    base = signed(level, 8, seed=7, context=b"\x01") + signed(level, 8, seed=8)
    items = [m.mutant(base[i % len(base)], rng.choice(["flip_pk", "flip_msg", "flip_sig", "flip_ctx"]), rng)
             for i in range(48)]
    assert assert_agrees(lib, base + items, kernel) == [True] * len(base) + [False] * len(items)


@pytest.mark.parametrize("level", LEVELS)
def test_kernel_host_backend_serves_the_scheme(lib, level):
    """The engine path: Batch → ops → zv_verify_ml_dsa_<level>, with the batch's context."""
    scheme = SCHEMES[f"ml-dsa-{level}"]
    items = signed(level, 3, seed=11, context=b"batch ctx")
    items[1] = replace(items[1], message=items[1].message + b"!")
    batch = Batch.from_items(scheme, [it.public_key for it in items], [it.message for it in items],
                             [it.signature for it in items], ctx=b"batch ctx")
    backend = KernelHostBackend()
    assert backend.availability()[scheme.id] == "ready"
    assert backend.run(batch).verdicts.tolist() == [True, False, True]


# ------------------------------------------------------------------ external vectors
def wycheproof_items(root: Path, level: int) -> list[tuple[Item, bool, int]]:
    """Every test of wycheproof/testvectors_v1/mldsa_<level>_verify_test.json as
    (item, expected verdict, tcId); empty when the file is absent."""
    path = root / "wycheproof" / "testvectors_v1" / f"mldsa_{level}_verify_test.json"
    if not path.is_file():
        return []
    out = []
    for g in json.loads(path.read_text())["testGroups"]:
        pk = bytes.fromhex(g["publicKey"])
        for t in g["tests"]:
            it = Item(f"ml-dsa-{level}", pk, bytes.fromhex(t["msg"]), bytes.fromhex(t["sig"]),
                      bytes.fromhex(t.get("ctx", "")))
            out.append((it, t["result"] == "valid", t["tcId"]))
    return out


def check_wycheproof(lib, root: Path, level: int, kernel: str = "thread") -> int:
    """Kernel == OpenSSL == Wycheproof's result on every vector of ``level``; returns the count."""
    cases = wycheproof_items(root, level)
    got = assert_agrees(lib, [c[0] for c in cases], kernel)
    wrong = [tc for (_, want, tc), g in zip(cases, got) if g != want]
    assert not wrong, f"verdicts differ from Wycheproof's on tcId {wrong}"
    return len(cases)


@pytest.mark.parametrize("level", LEVELS)
def test_wycheproof_vectors(lib, vectors_root, level, kernel):
    if not wycheproof_items(vectors_root, level):
        pytest.skip(f"mldsa_{level}_verify_test.json is absent")
    assert check_wycheproof(lib, vectors_root, level, kernel) >= 100


# ------------------------------------------------------------------ the pieces
def _i32(values) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int32)


def test_ntt_product_equals_schoolbook_negacyclic_product(lib):
    rng = random.Random(1)
    q = m.Q
    cases = [([q - 1] * 256, [-(q - 1)] * 256),  # the extremes of the input bound |a| < q
             ([1] + [0] * 255, [rng.randrange(-q + 1, q) for _ in range(256)]),
             ([0] * 255 + [1], [0] * 255 + [1])]  # X^255 · X^255 = −X^254
    cases += [([rng.randrange(-q + 1, q) for _ in range(256)], [rng.randrange(-q + 1, q) for _ in range(256)])
              for _ in range(4)]
    for a, b in cases:
        out, x, y = np.zeros(256, np.int32), _i32(a), _i32(b)  # held while the kernel reads them
        lib.zv_mldsa_hook_polymul(ctypes.c_void_p(out.ctypes.data), ctypes.c_void_p(x.ctypes.data),
                                   ctypes.c_void_p(y.ctypes.data))
        assert out.tolist() == m.polymul([x % q for x in a], [y % q for y in b])


@pytest.mark.parametrize("level", LEVELS)
def test_sample_in_ball_matches_fips204_alg29(lib, level):
    p = m.PARAMS[level]
    rng = random.Random(level)
    for _ in range(20):
        ct = rng.randbytes(p.ct_bytes)
        out, ct_buf = np.zeros(256, np.int32), _buf(ct)
        assert lib.zv_mldsa_hook_sample_in_ball(level, ctypes.c_void_p(out.ctypes.data),
                                                 ctypes.c_void_p(ct_buf.ctypes.data)) == 1
        want = m.sample_in_ball(ct, p)
        assert out.tolist() == want and sum(map(abs, want)) == p.tau


@pytest.mark.parametrize("level", LEVELS)
def test_use_hint_matches_fips204_alg40(lib, level):
    p = m.PARAMS[level]
    g2, q = p.gamma2, m.Q
    edges = {0, 1, g2 - 1, g2, g2 + 1, 2 * g2 - 1, 2 * g2, 2 * g2 + 1, q - g2 - 1, q - g2, q - g2 + 1, q - 2, q - 1}
    rng = random.Random(level)
    for r in sorted(edges | {rng.randrange(q) for _ in range(300)}):
        for h in (0, 1):
            assert lib.zv_mldsa_hook_use_hint(level, r, h) == m.use_hint(r, bool(h), p), (r, h)


def test_tables_are_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_ml_dsa_tables"), "--check"])
    assert proc.returncode == 0, "ml_dsa_tables.cuh differs from scripts/gen_ml_dsa_tables' output"
