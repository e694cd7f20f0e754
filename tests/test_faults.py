"""Fault injection (app/engine/verify/faults.py, ``ZAPVERIFY_FAULTS``) and a kernel build failure
reported as degraded in /readyz, /v1/status and ``zapverify_backend_available``
(docs/operations.md, "Fault injection")."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY
from starlette.testclient import TestClient

from app.api.metrics import refresh_gauges
from app.config import Settings
from app.core.errors import ConfigError, KernelBuildError
from app.core.result import Result
from app.engine.backends.base import READY, Backend, Capabilities
from app.engine.backends.kernel import KernelBackend
from app.engine.device.registry import VERIFY_KERNELS
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.engine.verify.engine import Engine, EngineConfig
from app.main import create_app

ED = [ka.item for ka in kat.known_answers()["ed25519"]]
ED_EXPECTED = [ka.expected for ka in kat.known_answers()["ed25519"]]


class _CpuTwin(Backend):
    """An accelerator stand-in that answers with the CPU's verdicts (a healthy backend)."""

    name = "twin"

    def __init__(self):
        from app.engine.backends.cpu import CpuBackend

        self.cpu, self.calls = CpuBackend(workers=1), 0

    def capabilities(self):
        return Capabilities(schemes={"ed25519": READY})

    def run(self, batch, *, commit=False):
        self.calls += 1
        return Result.of(self.name, self.cpu.run(batch).verdicts)


@pytest.mark.parametrize("faults,field", [({"ed25519": "raise"}, "faults"), ({"twin:nope": "raise"}, "faults"),
                                          ({"twin:ed25519": "melt"}, "faults"), ({"cpu:ed25519": "raise"}, "faults")])
def test_bad_fault_settings_are_named_config_errors(faults, field):
    with pytest.raises(ConfigError) as e:
        Engine(EngineConfig(cpu_workers=1, faults=faults))
    assert e.value.field == field


def test_selftest_fault_degrades_the_backend():
    twin = _CpuTwin()
    eng = Engine(EngineConfig(cpu_workers=1, faults={"twin:ed25519": "selftest"}), backends=[twin])
    eng.start()
    assert eng.ready and "fault injected" in eng.degraded()["ed25519"]["twin"]
    res = eng.run(ED)
    assert res.backends == {"ed25519": "cpu"} and res.verdicts.tolist() == ED_EXPECTED


@pytest.mark.parametrize("mode", ["raise", "garbage"])
def test_runtime_faults_fall_back_to_the_cpu_with_right_verdicts(mode):
    twin = _CpuTwin()
    eng = Engine(EngineConfig(cpu_workers=1, faults={"twin:ed25519": mode}), backends=[twin])
    eng.start()
    assert eng.routes["ed25519"].selftest["twin"] is True and eng.degraded() == {}  # passed at start
    res = eng.run(ED)
    assert res.backends == {"ed25519": "cpu"} and res.verdicts.tolist() == ED_EXPECTED
    assert "runtime" in eng.degraded()["ed25519"]["twin"]


def test_cpu_selftest_fault_keeps_the_engine_not_ready():
    eng = Engine(EngineConfig(cpu_workers=1, faults={"cpu:ml-dsa-44": "selftest"}))
    eng.start()
    assert not eng.ready and not eng.routes["ml-dsa-44"].selftest["cpu"]
    assert eng.routes["ed25519"].selftest["cpu"]


def test_fault_setting_reaches_a_running_app():
    settings = Settings(receipts=False, backend="cpu", faults={"cpu:ed25519": "selftest"})
    with TestClient(create_app(settings)) as client:
        for _ in range(600):
            body = client.get("/readyz").json()
            if body.get("failed"):
                break
            time.sleep(0.1)
        r = client.get("/readyz")
        assert r.status_code == 503 and "ed25519" in r.json()["failed"]


class _BrokenCompiler:
    """A kernel device whose compiler rejects every source."""

    def function(self, source, entry):
        raise KernelBuildError(f"g++ rejected {source.name}: {entry}")

    def info(self):
        return {"kind": "broken"}


class _BrokenKernels(KernelBackend):
    name = "kernel-host"

    def _make_device(self):
        return _BrokenCompiler()


def _gauge(backend: str, scheme: str) -> float | None:
    return REGISTRY.get_sample_value("zapverify_backend_available", {"backend": backend, "scheme": scheme})


def test_a_kernel_build_failure_is_degraded_everywhere():
    backend = _BrokenKernels(VERIFY_KERNELS)
    assert backend.available() and "ed25519" not in backend.schemes()
    eng = Engine(EngineConfig(backend="kernel-host", cpu_workers=1), backends=[backend])
    eng.start()
    assert "build failed" in eng.degraded()["ed25519"]["kernel-host"]
    assert eng.run(ED).backends == {"ed25519": "cpu"}  # forced, but its kernel did not build
    refresh_gauges(Runtime(eng))
    assert _gauge("kernel-host", "ed25519") == 0
    with TestClient(create_app(Settings(receipts=False), runtime=Runtime(eng))) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200 and "build failed" in ready.json()["degraded"]["ed25519"]["kernel-host"]
        status = client.get("/v1/status").json()
        assert "kernel-host" in status["engine"]["degraded"]["ed25519"]
