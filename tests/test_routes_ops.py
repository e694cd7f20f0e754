"""/v1/status and the dashboard show host class, transport, allocator, probe reasons and pool use."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.engine.configs import ingest_config, pool_config
from app.engine.runtime import PoolConfig, Runtime
from app.engine.verify.engine import EngineConfig
from app.main import create_app
from tests.server import free_port, free_udp_port

MIB = 1 << 20


@pytest.fixture(scope="module")
def pool_runtime():
    rt = Runtime.open(EngineConfig(backend="cpu"), PoolConfig(8 * MIB))
    rt.engine.start()
    return rt


@pytest.fixture(scope="module")
def client(pool_runtime):
    with TestClient(create_app(Settings(instance="ops-1"), runtime=pool_runtime)) as c:
        yield c


def test_status_shows_host_pick_and_pool(client, pool_runtime):
    with pool_runtime.pool.acquire(5000, "ingest") as buf:
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


def test_settings_reach_the_pool_config(monkeypatch):
    monkeypatch.setenv("ZAP_UMA_POOL_BYTES", str(32 * MIB))
    monkeypatch.setenv("ZAP_TRANSPORT", "heap")
    monkeypatch.setenv("ZAPVERIFY_POOL_WAIT_SECONDS", "2.5")
    cfg = pool_config(Settings())
    assert (cfg.size_bytes, cfg.transport, cfg.source, cfg.wait_seconds, cfg.debug) == (
        32 * MIB, "heap", "auto", 2.5, False)


@pytest.fixture
def own_runtime():
    """A runtime for one app: an app's lifespan closes its runtime (engine and pool) when it ends."""
    rt = Runtime.open(EngineConfig(backend="cpu"), PoolConfig(8 * MIB))
    rt.engine.start()
    return rt


def test_status_reports_ingest_ports_and_counters(own_runtime):
    import asyncio

    from app.engine.reference import kat
    from app.wire import zap
    from zapverify.ingest import connect

    tcp, udp, quic = free_port(), free_udp_port(), free_udp_port()
    settings = Settings(receipts=False, ingest_tcp_port=tcp, ingest_udp_port=udp, ingest_quic_port=quic)
    items = kat.sign_items("ed25519", 3, seed=2)
    frame = bytes(zap.encode_items("ed25519", [i.public_key for i in items], [i.message for i in items],
                                   [i.signature for i in items]))
    with TestClient(create_app(settings, runtime=own_runtime)) as c:
        async def send():
            async with connect("tcp", "127.0.0.1", tcp) as s:
                return await (await s.submit(frame))

        assert asyncio.run(asyncio.wait_for(send(), 30)).valid == 3
        ingest = c.get("/v1/status").json()["ingest"]
    assert ingest["enabled"] and ingest["bind"] == "127.0.0.1" and ingest["ring"]["capacity"] == 1024
    t = ingest["transports"]
    assert (t["tcp"]["port"], t["udp"]["port"], t["quic"]["port"]) == (tcp, udp, quic)
    assert t["tcp"]["frames_received"] == t["tcp"]["frames_verified"] == t["tcp"]["replies_sent"] == 1
    assert t["tcp"]["bytes_received"] == len(frame) and t["tcp"]["dropped"]["bad_magic"] == 0
    assert {"ring_depth", "ring_high_water", "dropped_total"} <= set(t["udp"])
    assert t["quic"]["alpn"] == "zap/1" and len(t["quic"]["certificate_sha256"]) == 64


def test_ingest_frames_reach_metrics_and_the_dashboard_feed(own_runtime, tmp_path):
    """Each frame's outcome goes to zapverify_ingest_frames_total and to the stats the
    dashboard reads (``stats.ingest``), next to the listener's own counters (``ingest``)."""
    import asyncio
    import socket

    from prometheus_client.parser import text_string_to_metric_families

    from app.engine.reference import kat
    from app.wire import zap
    from zapverify.ingest import connect

    tcp = free_port()
    settings = Settings(receipts=False, ingest_tcp_port=tcp, data_dir=tmp_path)
    items = kat.sign_items("ed25519", 2, seed=5)
    frame = bytes(zap.encode_items("ed25519", [i.public_key for i in items], [i.message for i in items],
                                   [i.signature for i in items]))

    def samples(c) -> dict[str, float]:
        fams = text_string_to_metric_families(c.get("/metrics").text)
        return {s.labels["outcome"]: s.value for f in fams if f.name == "zapverify_ingest_frames"
                for s in f.samples if s.name.endswith("_total") and s.labels.get("transport") == "tcp"}

    with TestClient(create_app(settings, runtime=own_runtime)) as c:
        before = samples(c)

        async def send():
            async with connect("tcp", "127.0.0.1", tcp) as s:
                return [await f for f in [await s.submit(frame) for _ in range(3)]]

        assert [r.valid for r in asyncio.run(asyncio.wait_for(send(), 30))] == [2, 2, 2]
        with socket.create_connection(("127.0.0.1", tcp), timeout=10) as raw:
            raw.sendall(b"HTTP/1.1 GET /\r\n\r\n")
            while raw.recv(4096):  # the error frame, then the server closes
                pass
        after = samples(c)
        status = c.get("/v1/status").json()
    assert after.get("accepted", 0) - before.get("accepted", 0) == 3
    assert after.get("bad_magic", 0) - before.get("bad_magic", 0) == 1
    assert status["stats"]["ingest"]["tcp"]["accepted"] >= 3 and status["stats"]["ingest"]["tcp"]["bad_magic"] >= 1
    assert status["ingest"]["transports"]["tcp"]["dropped"]["bad_magic"] == 1


def test_dashboard_shows_the_ingest_listeners(client):
    html = client.get("/").text
    assert "s.ingest.transports" in html and "ring_high_water" in html and "replies_sent" in html


def test_ingest_is_off_by_default_and_settings_reach_it(client, monkeypatch):
    assert client.get("/v1/status").json()["ingest"]["enabled"] is False
    monkeypatch.setenv("ZAPVERIFY_INGEST_TCP_PORT", "7100")
    monkeypatch.setenv("ZAPVERIFY_INGEST_HOST", "0.0.0.0")
    monkeypatch.setenv("ZAPVERIFY_INGEST_COALESCE_ITEMS", "64")
    cfg = ingest_config(Settings())
    assert (cfg.host, cfg.tcp_port, cfg.udp_port, cfg.quic_port, cfg.coalesce_items) == ("0.0.0.0", 7100, None,
                                                                                        None, 64)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_probes_answer_head(client, path):
    # Load balancers and some probes use HEAD: same status as GET, no body.
    get, head = client.get(path), client.head(path)
    assert head.status_code == get.status_code == 200
    assert head.content == b""
