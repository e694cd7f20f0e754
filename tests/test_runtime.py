"""The runtime owns the UMA pool: probe and pick when it opens, pool closed with it; the engine
has none (it only routes).  The runtime is the whole process: one async context starts every
part in order and stops them in reverse, tested here without a web framework."""

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


# ------------------------------------------------------------------ the process's life, no web framework
def _settings(tmp_path, **kw):
    from app.config import Settings

    return Settings(data_dir=tmp_path, backend="cpu", cpu_workers=1, uma_pool_bytes=4 * MIB, pool_source="heap",
                    listen_when_ready=True, **kw)


def _traced(monkeypatch, order: list[str]) -> None:
    """Record when each part stops: the ingest, the worker exchange, the admission listener,
    the pruner, the store and the runtime itself."""
    from app.engine.ingest import Ingest
    from app.engine.receipts.pruner import Pruner
    from app.engine.receipts.sqlite import SqliteStore
    from app.engine.stats import Stats
    from app.engine.workers import WorkerExchange

    def trace(cls, name, label):
        real = getattr(cls, name)

        def wrapped(self, *a, **kw):
            order.append(label)
            return real(self, *a, **kw)

        monkeypatch.setattr(cls, name, wrapped)

    trace(Ingest, "stop", "ingest")
    trace(WorkerExchange, "withdraw", "exchange")
    trace(Stats, "remove_listener", "admission")
    trace(Pruner, "stop", "pruner")
    trace(SqliteStore, "close", "store")
    trace(Runtime, "close", "runtime")


def test_running_starts_every_part_then_stops_them_in_reverse(tmp_path, monkeypatch):
    import asyncio

    from app.core.errors import NotReady
    from app.engine.pipeline import verify_and_record
    from app.engine.reference import kat

    order: list[str] = []
    _traced(monkeypatch, order)
    rt = Runtime(settings=_settings(tmp_path))
    with pytest.raises(NotReady):
        _ = rt.engine  # built when the runtime starts, not before
    assert rt.admission.max_items == rt.settings.admission_max_items
    ka = kat.known_answers()["ed25519"][0]
    seen: list[int] = []

    async def serve():
        async with rt.running(exchange=tmp_path / "exchange", background=[lambda: _tick(seen)]) as running:
            assert running is rt
            assert rt.engine.ready  # listen_when_ready: the self-test passed before the yield
            assert rt.pick is not None and rt.pool is not None and rt.store is not None and rt.pruner is not None
            assert rt.ingest is not None and rt.exchange is not None
            assert (tmp_path / "exchange").is_dir()
            rec = await asyncio.to_thread(verify_and_record, rt.engine, rt.store, [ka.item], source="http",
                                          started=0.0)
            assert rec.verdicts.tolist() == [ka.expected]
            assert rt.store.get(rec.batch_id) is not None  # the runtime's store took the receipt
            await asyncio.sleep(0.05)
            assert seen  # the background task ran
            assert order == []

    asyncio.run(serve())
    assert order == ["ingest", "exchange", "admission", "pruner", "store", "runtime"]
    with pytest.raises(AllocatorUnavailable):
        rt.pool.acquire(1, "ingest")  # closed with the runtime


async def _tick(seen: list[int]) -> None:
    import asyncio

    while True:
        seen.append(1)
        await asyncio.sleep(0.01)


def test_a_failed_selftest_stops_the_start_and_closes_what_was_opened(tmp_path, monkeypatch):
    import asyncio

    from app.core.errors import NotReady
    from app.engine.verify.engine import Engine

    order: list[str] = []
    _traced(monkeypatch, order)
    monkeypatch.setattr(Engine, "start", lambda self: None)  # a self-test that leaves the engine not ready
    rt = Runtime(settings=_settings(tmp_path))

    async def serve():
        async with rt.running():
            pass

    with pytest.raises(NotReady):
        asyncio.run(serve())
    assert order == ["pruner", "store", "runtime"]  # nothing after the self-test was started


def test_a_runtime_around_parts_made_elsewhere_takes_the_settings_it_is_bound_to(tmp_path):
    rt = Runtime.open(EngineConfig(backend="cpu"))
    assert not rt.bound
    settings = _settings(tmp_path, admission_max_items=1234, receipts=False)
    rt.bind(settings)
    assert rt.bound and rt.settings is settings and rt.admission.max_items == 1234
    rt.close()
