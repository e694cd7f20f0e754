"""The kernel-host backend: discovery, the engine path, the CLI, and every real kernel family.

Real signature kernels (ed25519.cu, secp256k1.cu, ...) are checked against the generated
known answers here as soon as their source files exist; until then those tests skip.
"""

import ctypes

import numpy as np
import pytest

from app.cli import main
from app.core.schemes import SCHEMES
from app.engine.backends.factory import accelerated_backends
from app.engine.backends.kernel_host import KernelHostBackend
from app.engine.commit import merkle
from app.engine.device import hostbuild, registry
from app.engine.reference import kat
from app.engine.verify.engine import Engine, EngineConfig
from app.engine.verify.grouping import batch_of, group_items
from app.vectors import generated, write_jsonl
from tests.toy_scheme import NO_SHADOW, TOY_ALL, ToyCpu, toy_answers

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")

PRESENT = sorted(sid for sid, s in SCHEMES.items() if registry.verify_kernel(s) is not None)


def test_offered_schemes_are_exactly_those_with_a_kernel_source():
    b = KernelHostBackend()
    assert b.available() and b.merkle_state() == "ready"
    assert set(b.schemes()) == set(PRESENT)
    for sid, state in b.availability().items():
        assert state == ("ready" if sid in PRESENT else "no kernel"), sid


def test_forced_kernel_host_engine_runs_the_toy_kernel(monkeypatch):
    answers = toy_answers()
    monkeypatch.setattr(kat, "known_answers", lambda: answers)
    eng = Engine(EngineConfig(backend="kernel-host", **NO_SHADOW), backends=[KernelHostBackend(kernels=TOY_ALL),
                                                                             ToyCpu()])
    eng.start()
    assert eng.ready and eng.merkle["kernel-host"] == "ready"
    items = [ka.item for ka in answers["slh-dsa-shake-256f"]]
    [(key, idx)] = [(k, v) for k, v in group_items(items).items() if k and not k[2]]
    batch = batch_of(key, [items[i] for i in idx])
    res = eng.run(batch)
    assert res.backend == "kernel-host" and res.merkle_backend == "kernel-host"
    assert res.verdicts.tolist() == [answers["slh-dsa-shake-256f"][i].expected for i in idx]
    assert res.root == merkle.root(merkle.batch_leaves(batch, res.verdicts))


def test_factory_builds_kernel_host_only_when_asked():
    assert [b.name for b in accelerated_backends("kernel-host")] == ["kernel-host"]
    assert all(b.name != "kernel-host" for b in accelerated_backends("auto"))


def test_check_vectors_with_backend_kernel_host(tmp_path, capsys):
    path = tmp_path / "gen.jsonl"
    n = write_jsonl(path, generated(1, 1, seed=3, schemes=["ed25519", "secp256k1", "ml-dsa-44"]))
    assert main(["check-vectors", str(path), "--backend", "kernel-host"]) == 0
    out = capsys.readouterr().out
    assert f"backend=kernel-host vectors={n} agree={n} disagree=0" in out


def test_selftest_command_reports_kernel_host_routes(capsys):
    assert main(["selftest", "--backend", "kernel-host"]) == 0
    out = capsys.readouterr().out
    for sid in PRESENT:
        assert f"{sid}" in out and "kernel-host=pass" in out.split(sid, 1)[1].splitlines()[0]


@pytest.mark.parametrize("scheme_id", PRESENT or [pytest.param(None, marks=pytest.mark.skip("no kernel yet"))])
def test_real_kernel_family_matches_known_answers(scheme_id):
    b = KernelHostBackend()
    kas = kat.known_answers()[scheme_id]
    for key, idx in group_items([ka.item for ka in kas]).items():
        if key is None:
            continue
        batch = batch_of(key, [kas[i].item for i in idx])
        _r = b.run(batch, commit=True)
        verdicts, root = _r.verdicts, _r.root
        assert verdicts.tolist() == [kas[i].expected for i in idx]
        assert root == merkle.root(merkle.batch_leaves(batch, verdicts))


def test_kernel_cache_rebuilds_when_a_source_or_header_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("ZAPVERIFY_KERNEL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "k"
    src.mkdir()
    (src / "answer.cuh").write_text("#define ANSWER_BASE 40\n")
    body = ('#include "zv_port.cuh"\n#include "answer.cuh"\n'
            'ZV_KERNEL void zv_answer(zv_u32 *out) {{ *out = ANSWER_BASE + {}; }}\n')
    (src / "answer.cu").write_text(body.format(1))

    def run() -> int:
        out = np.zeros(1, dtype=np.uint32)
        hostbuild.load("answer", src).zv_answer(ctypes.c_void_p(out.ctypes.data))
        return int(out[0])

    first = hostbuild.build("answer", src)
    assert hostbuild.build("answer", src) == first and run() == 41  # cached, not rebuilt
    (src / "answer.cu").write_text(body.format(2))
    assert hostbuild.build("answer", src) != first and run() == 42
    (src / "answer.cuh").write_text("#define ANSWER_BASE 50\n")
    assert run() == 52
    assert len(list((tmp_path / "cache").glob("answer-*.so"))) == 3
