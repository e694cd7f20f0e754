"""The runtime owns the UMA pool: probe and pick when it opens, pool closed with it; the engine
has none (it only routes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.core.errors import AllocatorUnavailable, TransportUnavailable
from app.engine.runtime import PoolConfig, Runtime
from app.engine.verify.engine import EngineConfig
from tests import fakehost as fh

MIB = 1 << 20


def test_runtime_without_pool_settings_has_no_pool():
    rt = Runtime.open(EngineConfig(backend="cpu"))
    assert (rt.host, rt.pick, rt.pool) == (None, None, None)
    assert rt.host_status() == {"probe": None, "pick": None, "pool": None}
    assert not hasattr(rt.engine, "pool") and rt.stats is rt.engine.stats
    rt.close()


def test_runtime_owns_one_pool_from_its_config(tmp_path):
    rt = Runtime.open(EngineConfig(backend="cpu"),
                      PoolConfig(4 * MIB, wait_seconds=0.25, debug=True, probe_root=str(fh.linux(tmp_path))))
    assert rt.pick.headline == "Linux, no GPU → heap"
    assert (rt.pool.source, rt.pool.capacity_bytes, rt.pool.wait_seconds, rt.pool.debug) == (
        "heap", 4 * MIB, 0.25, True)
    with rt.pool.acquire(100, "ingest"):
        st = rt.host_status()
        assert st["pick"]["transport"] == "heap" and st["pool"]["by_owner"]["ingest"] == 256
        assert st["probe"]["root"] == str(tmp_path)
    rt.close()
    with pytest.raises(AllocatorUnavailable):
        rt.pool.acquire(1, "ingest")


def test_forced_transport_fails_to_open(tmp_path):
    with pytest.raises(TransportUnavailable) as err:
        Runtime.open(EngineConfig(), PoolConfig(MIB, transport="dpdk", probe_root=str(fh.linux(tmp_path))))
    assert err.value.missing == ["no hugepages reserved (nr_hugepages = 0 for 2048 kB, 1048576 kB)",
                                 "vfio-pci driver not loaded (/sys/bus/pci/drivers/vfio-pci is absent)"]


def test_pool_source_override_needs_the_memory(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(AllocatorUnavailable, match="needs CuPy"):
        Runtime.open(EngineConfig(), PoolConfig(MIB, source="managed", probe_root=str(fh.linux(tmp_path))))


def test_engine_imports_no_web_stack():
    code = ("import sys, app.engine.verify.engine, app.engine.runtime, app.engine.memory.pool, "
            "app.engine.host.pick, app.engine.host.probe, app.engine.pipeline, app.engine.ingest; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'fastapi', 'starlette', 'cupy')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
