"""The one backend contract (docs/architecture.md, "Backends"): every backend has one ``run``
returning a Result and declares a Capabilities record; the engine never probes for methods."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from app.core.batch import AggregateBatch
from app.core.result import Result, Span
from app.engine.backends.base import READY, Backend, Capabilities
from app.engine.backends.cpu import CpuBackend
from app.engine.backends.cuda import CudaBackend
from app.engine.backends.kernel_host import KernelHostBackend
from app.engine.commit import merkle
from app.engine.commit.step import CommitStep
from app.engine.reference import kat
from app.engine.verify.faults import FaultyBackend
from app.engine.verify.grouping import batch_of, group_items

ROOT = Path(__file__).resolve().parents[1]
#: The call shapes the contract replaced: none may come back beside ``run``.
OLD = {"verify", "verify_with_leaves", "verify_commit", "verify_aggregate", "commit", "merkle_root"}


@pytest.mark.parametrize("cls", [CpuBackend, KernelHostBackend, CudaBackend, FaultyBackend])
def test_every_backend_has_one_run_and_declares_its_capabilities(cls):
    assert Backend in cls.__mro__ and callable(cls.run) and callable(cls.capabilities)
    assert OLD.isdisjoint(name for name in dir(cls) if not name.startswith("_"))


@pytest.mark.parametrize("module", ["engine.py", "selftest.py", "calibrate.py", "status.py"])
def test_the_engine_never_probes_a_backend_for_a_method(module):
    tree = ast.parse((ROOT / "app/engine/verify" / module).read_text())
    probes = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in ("getattr", "hasattr")]
    assert probes == []


def _ed25519_batch():
    kas = kat.known_answers()["ed25519"]
    key, idx = max(((k, i) for k, i in group_items([ka.item for ka in kas]).items() if k is not None),
                   key=lambda kv: len(kv[1]))
    return batch_of(key, [kas[i].item for i in idx]), np.array([kas[i].expected for i in idx])


def test_cpu_run_gives_verdicts_and_leaves_and_the_commit_step_the_root():
    batch, want = _ed25519_batch()
    cpu = CpuBackend(workers=1, parallelism="thread")
    try:
        assert cpu.capabilities().served == frozenset(cpu.capabilities().schemes) and cpu.capabilities().aggregates
        got = cpu.run(batch).check(len(batch))
    finally:
        cpu.close()
    assert got.verdicts.tolist() == want.tolist() and got.backend == "cpu"
    assert np.array_equal(got.leaves, merkle.batch_leaves(batch, want)) and got.root is None
    done = CommitStep()(batch, got)
    assert done.root == merkle.root(merkle.batch_leaves(batch, want))


def test_kernel_host_commits_on_its_device_like_the_cpu():
    batch, want = _ed25519_batch()
    host = KernelHostBackend()
    caps = host.capabilities()
    if caps.schemes.get("ed25519") != READY:
        pytest.skip(f"no ed25519 kernel host build here: {caps.schemes.get('ed25519')}")
    assert caps.commits == READY and not caps.calibrate_at_start
    got = host.run(batch, commit=True).check(len(batch))
    assert got.verdicts.tolist() == want.tolist()
    assert np.array_equal(got.leaves, merkle.batch_leaves(batch, want))
    assert got.root == merkle.root(merkle.batch_leaves(batch, want))
    # BLS aggregate items run on the device too (issue 40, bls12_381_aggregate.cu).
    assert caps.aggregates and host.run(AggregateBatch(())).check(0).verdicts.shape == (0,)


def test_a_result_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="verdicts"):
        Result.of("x", [True, False]).check(3)
    with pytest.raises(ValueError, match="leaves"):
        Result.of("x", [True], np.zeros((1, 31), np.uint8)).check(1)
    with pytest.raises(ValueError, match="root"):
        Result(np.ones(1, bool), None, b"\0" * 32).check(1)


def test_joined_results_keep_spans_and_leaves_in_order_and_drop_the_root():
    a = Result.of("cuda", [True, False], np.ones((2, 32), np.uint8), b"\1" * 32)
    b = Result.of("cpu", [True], np.zeros((1, 32), np.uint8))
    j = Result.join([a, b])
    assert j.verdicts.tolist() == [True, False, True] and j.root is None
    assert j.spans == (Span(0, 2, "cuda"), Span(2, 3, "cpu")) and j.backend == "cuda+cpu"
    assert j.leaves.tolist() == [[1] * 32, [1] * 32, [0] * 32]
    assert Result.join([a, Result.of("cpu", [False])]).leaves is None  # a part without leaves
    assert Capabilities(schemes={"a": READY, "b": "build failed: x", "c": "no kernel"}).broken() == {
        "b": "build failed: x"}
