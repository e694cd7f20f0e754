"""The CPU backend's own ML-DSA verify (app/engine/backends/native_ml_dsa.cpp) against OpenSSL,
the reference that defines verdicts, on every code path this CPU runs (AVX-512, AVX2,
portable) and on a build with the vector code compiled out (-DZV_MLDSA_PORTABLE).

Every verdict is compared with :func:`tests.oracles.ml_dsa_model.openssl_verdicts` on every
Wycheproof ML-DSA vector (read in place from ../shared/vectors; skipped where absent) and on
a CI-sized sample of generated valid items and every mutation kind of
tests/oracles/ml_dsa_model.py; the vector UseHint is checked on every r in [0, q).  The suite
builds with the ZV_CHECK bounds checks on (tests/conftest.py), and every test ends with none
failed.  ``scripts/agreement --scheme ml-dsa --kernel cpu`` runs the same comparison at scale.
"""

from __future__ import annotations

import ctypes
import random
from dataclasses import replace

import pytest

from app.core.batch import Batch, Item
from app.core.schemes import SCHEMES
from app.engine.backends import native_ml_dsa
from app.engine.backends.cpu import CpuBackend
from app.engine.device import hostbuild
from app.engine.reference import kat
from tests.oracles import ml_dsa_model as m
from tests.test_kernel_ml_dsa import wycheproof_items

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")

LEVELS = (44, 65, 87)


@pytest.fixture(scope="module")
def best() -> native_ml_dsa.MlDsaVerifier:
    v = native_ml_dsa.load()
    assert hostbuild.verify_failures(v.lib) is not None, "the suite builds with ZV_CHECK on"
    return v


@pytest.fixture(scope="module")
def portable_build() -> native_ml_dsa.MlDsaVerifier:
    """The library with the vector code compiled out: only the portable path is left."""
    v = native_ml_dsa.MlDsaVerifier(ctypes.CDLL(str(native_ml_dsa.build(("ZV_MLDSA_PORTABLE",)))))
    assert v.best_isa == 0
    return v


def _paths(best: native_ml_dsa.MlDsaVerifier) -> list[int]:
    return list(range(best.best_isa + 1))


@pytest.fixture(params=["avx512", "avx2", "portable", "portable-build"])
def path(request, best, portable_build):
    """(verifier, isa) of one code path; a path this CPU lacks is skipped."""
    if request.param == "portable-build":
        v, isa = portable_build, 0
    else:
        v, isa = best, {"avx512": 2, "avx2": 1, "portable": 0}[request.param]
        if isa > best.best_isa:
            pytest.skip(f"this CPU has no {request.param}")
    before = hostbuild.verify_failures(v.lib)
    yield v, isa
    assert hostbuild.verify_failures(v.lib) == before, "a ZV_CHECK bound failed"


def assert_agrees(path, items: list[Item]) -> list[bool]:
    v, isa = path
    return m.assert_agrees_with_openssl(items, m.cpu_verdicts(v, items, isa))


def signed(level: int, count: int, seed: int = 0, context: bytes = b"", msg_len: int | None = None) -> list[Item]:
    return kat.sign_items(f"ml-dsa-{level}", count, seed=seed, context=context, msg_len=msg_len)


@pytest.mark.parametrize("level", LEVELS)
def test_valid_items_under_contexts_of_every_edge_length(path, level):
    items = []
    for n, ctx_len in enumerate((0, 1, 254, 255)):
        items += signed(level, 3, seed=n, context=bytes(range(ctx_len)))
    items += signed(level, 2, seed=9, msg_len=0) + signed(level, 1, seed=10, msg_len=5000)
    assert all(assert_agrees(path, items))


@pytest.mark.parametrize("level", LEVELS)
def test_wrong_context_and_lengths_are_false(path, level):
    [it] = signed(level, 1, seed=1, context=bytes(255))
    items = [replace(it, context=bytes(256)), replace(it, context=bytes(254)), replace(it, context=b""),
             replace(it, public_key=it.public_key[:-1]), replace(it, public_key=it.public_key + b"\0"),
             replace(it, signature=it.signature[:-1]), replace(it, signature=it.signature + b"\0"),
             replace(it, public_key=b"", signature=b"")]
    assert assert_agrees(path, items) == [False] * len(items)
    other = signed(44 if level != 44 else 65, 1, seed=2)[0]  # another set's sizes
    assert m.cpu_verdicts(path[0], [replace(other, scheme=it.scheme)], path[1]) == [False]


@pytest.mark.parametrize("level", LEVELS)
def test_every_mutant_kind_agrees_and_is_rejected(path, level):
    rng = random.Random(f"ml-dsa-cpu-mutants/{level}")
    base = signed(level, 5, seed=3, context=b"zapverify") + signed(level, 5, seed=4)
    items, kinds = m.mutants(base, rng)
    got = assert_agrees(path, base + items)
    assert got[:len(base)] == [True] * len(base)
    accepted = [k for k, v in zip(kinds, got[len(base):]) if v]
    assert not accepted, f"mutants accepted: {accepted}"


@pytest.mark.parametrize("level", LEVELS)
def test_wycheproof_vectors(path, vectors_root, level):
    cases = wycheproof_items(vectors_root, level)
    if not cases:
        pytest.skip(f"mldsa_{level}_verify_test.json is absent")
    got = assert_agrees(path, [c[0] for c in cases])
    wrong = [tc for (_, want, tc), g in zip(cases, got) if g != want]
    assert not wrong, f"verdicts differ from Wycheproof's on tcId {wrong}"


@pytest.mark.parametrize("level", LEVELS)
def test_vector_use_hint_equals_the_kernels_on_every_r(best, level):
    for isa in range(1, best.best_isa + 1):
        assert best.lib.zv_mldsa_cpu_check_use_hint(level, isa) == 0, (level, native_ml_dsa.ISA_NAMES[isa])
    assert best.lib.zv_mldsa_cpu_check_use_hint(level, best.best_isa + 1) == -1  # a path the CPU lacks


def test_the_cpu_backend_serves_ml_dsa_with_the_batch_context(best):
    """The engine path: Batch → CpuBackend → the native loop, leaves beside the verdicts."""
    from app.engine.commit import merkle

    scheme = SCHEMES["ml-dsa-65"]
    items = signed(65, 6, seed=11, context=b"batch ctx")
    items[2] = replace(items[2], message=items[2].message + b"!")
    batch = Batch.from_items(scheme, [it.public_key for it in items], [it.message for it in items],
                             [it.signature for it in items], ctx=b"batch ctx")
    backend = CpuBackend(workers=2)
    try:
        assert backend.native_family(scheme) and backend.pool_kind(scheme) == "thread"
        result = backend.run(batch)
    finally:
        backend.close()
    assert result.verdicts.tolist() == [True, True, False, True, True, True]
    assert [bytes(x) for x in result.leaves] == [merkle.leaf_hash(scheme.code, i != 2, it.public_key, it.message,
                                                                  it.signature) for i, it in enumerate(items)]


def test_a_host_without_a_compiler_loads_the_prebuilt_library(tmp_path, monkeypatch):
    """native.prebuild (the images' build stage) prebuilds this library beside the loops."""
    from app.engine.backends import native, native_build

    native.prebuild(tmp_path)
    path = native_build.prebuilt_path(tmp_path, native_ml_dsa.SOURCE, native_ml_dsa.EXTRA)
    assert path.is_file()
    monkeypatch.setattr(hostbuild, "compiler", lambda: None)
    monkeypatch.setenv("ZAPVERIFY_NATIVE_DIR", str(tmp_path))
    assert native_ml_dsa.library() == path
    assert native_ml_dsa.MlDsaVerifier(ctypes.CDLL(str(path))).best_isa == native_ml_dsa.load().best_isa
    monkeypatch.setenv("ZAPVERIFY_NATIVE_DIR", str(tmp_path / "absent"))
    with pytest.raises(hostbuild.HostBuildError):
        native_ml_dsa.library()
