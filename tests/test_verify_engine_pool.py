"""The engine owns the UMA pool: probe and pick at construction, pool closed with the engine."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.core.errors import AllocatorUnavailable, TransportUnavailable
from app.engine.verify.engine import Engine, EngineConfig
from app.engine.verify.status import host_status
from tests import fakehost as fh

MIB = 1 << 20


def test_engine_without_pool_settings_has_no_pool():
    eng = Engine(EngineConfig(backend="cpu"))
    assert (eng.host, eng.pick, eng.pool) == (None, None, None)
    assert host_status(eng) == {"probe": None, "pick": None, "pool": None}
    eng.close()


def test_engine_owns_one_pool_from_its_config(tmp_path):
    eng = Engine(EngineConfig(backend="cpu", pool_bytes=4 * MIB, pool_wait_seconds=0.25, pool_debug=True,
                              probe_root=str(fh.linux(tmp_path))))
    assert eng.pick.headline == "Linux, no GPU → heap"
    assert (eng.pool.source, eng.pool.capacity_bytes, eng.pool.wait_seconds, eng.pool.debug) == (
        "heap", 4 * MIB, 0.25, True)
    with eng.pool.acquire(100, "ingest"):
        st = host_status(eng)
        assert st["pick"]["transport"] == "heap" and st["pool"]["by_owner"]["ingest"] == 256
        assert st["probe"]["root"] == str(tmp_path)
    eng.close()
    with pytest.raises(AllocatorUnavailable):
        eng.pool.acquire(1, "ingest")


def test_forced_transport_fails_engine_construction(tmp_path):
    with pytest.raises(TransportUnavailable) as err:
        Engine(EngineConfig(pool_bytes=MIB, transport="dpdk", probe_root=str(fh.linux(tmp_path))))
    assert err.value.missing == ["no hugepages reserved (nr_hugepages = 0 for 2048 kB, 1048576 kB)",
                                 "vfio-pci driver not loaded (/sys/bus/pci/drivers/vfio-pci is absent)"]


def test_pool_source_override_needs_the_memory(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(AllocatorUnavailable, match="needs CuPy"):
        Engine(EngineConfig(pool_bytes=MIB, pool_source="managed", probe_root=str(fh.linux(tmp_path))))


def test_engine_imports_no_web_stack():
    code = ("import sys, app.engine.verify.engine, app.engine.memory.pool, app.engine.host.pick, "
            "app.engine.host.probe, app.engine.pipeline, app.engine.ingest; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'fastapi', 'starlette', 'cupy')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
