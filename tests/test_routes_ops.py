"""/v1/status and the dashboard show host class, transport, allocator, probe reasons and pool use."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.engine.dispatch import Engine, EngineConfig
from app.main import create_app, engine_config

MIB = 1 << 20


@pytest.fixture(scope="module")
def pool_engine():
    eng = Engine(EngineConfig(backend="cpu", pool_bytes=8 * MIB))
    eng.start()
    return eng


@pytest.fixture(scope="module")
def client(pool_engine):
    with TestClient(create_app(Settings(instance="ops-1"), engine=pool_engine)) as c:
        yield c


def test_status_shows_host_pick_and_pool(client, pool_engine):
    with pool_engine.pool.acquire(5000, "ingest") as buf:
        buf.hand_off("dispatch")
        s = client.get("/v1/status").json()
    pick, pool, host = s["pick"], s["pool"], s["host"]
    assert host["class"] == pick["host_class"] and pick["headline"] == f"{host['label']} → {pick['transport']}"
    assert pick["transport"] in ("gpudirect", "dpdk", "uma", "heap") and pick["allocator"]
    assert all(set(host["probe"][c]) == {"available", "reasons"} for c in ("cuda", "rdma", "hugepages", "vfio"))
    assert pool["source"] == pick["pool_source"] and pool["requested_bytes"] == 8 * MIB
    assert pool["in_use_bytes"] == 16384 and pool["by_owner"]["dispatch"] == 16384
    assert [c["size_bytes"] for c in pool["classes"]] == [256, 1024, 4096, 16384, 65536, MIB]
    after = client.get("/v1/status").json()["pool"]
    assert after["in_use_bytes"] == 0 and after["high_water_bytes"] >= 16384


def test_dashboard_has_host_and_pool_sections(client):
    html = client.get("/").text
    # The page renders these from the snapshot (tests/system/test_dashboard_browser.py drives it).
    for marker in ('<h2>Host &amp; transport', 'id="host-class"', 'id="transport"', 'id="allocator"',
                   '<h2>UMA pool', 'id="pool"', 'id="probe"', "renderHost(s)", "renderPool(s)", "/v1/ws/stats"):
        assert marker in html


def test_settings_reach_the_engine_config(monkeypatch):
    monkeypatch.setenv("ZAP_UMA_POOL_BYTES", str(32 * MIB))
    monkeypatch.setenv("ZAP_TRANSPORT", "heap")
    monkeypatch.setenv("ZAPVERIFY_POOL_WAIT_SECONDS", "2.5")
    cfg = engine_config(Settings())
    assert (cfg.pool_bytes, cfg.transport, cfg.pool_source, cfg.pool_wait_seconds, cfg.pool_debug) == (
        32 * MIB, "heap", "auto", 2.5, False)
