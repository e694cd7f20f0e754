"""zapverify/loadgen.py (``zapverify bench``) against a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from app import cli
from app.core.errors import ConnectionFailed, RequestError
from zapverify import loadgen


@pytest.fixture(scope="module")
def ingest_server(engine):
    """A live server with all three ingest ports open."""
    from app.config import Settings
    from app.engine.runtime import Runtime
    from app.main import create_app
    from tests.server import LiveServer, free_port, free_udp_port

    settings = Settings(receipts=False, ingest_tcp_port=free_port(), ingest_udp_port=free_udp_port(),
                        ingest_quic_port=free_udp_port())
    with LiveServer(create_app(settings, runtime=Runtime(engine))) as server:
        yield server


@pytest.mark.parametrize("transport", ["json", "zap", "ws"])
def test_every_transport_measures_real_verifications(live_server, transport):
    cfg = loadgen.BenchConfig(url=live_server.url, scheme="ed25519", batch=8, duration=0.5, concurrency=3,
                              transport=transport, unique=4)
    ticks = []
    report = asyncio.run(loadgen.run(cfg, on_tick=lambda t, r: ticks.append((t, r.requests))))
    assert report.ok, report.first_error
    assert report.items == report.requests * 8
    assert report.verifies_per_s == pytest.approx(report.items / report.seconds)
    assert report.frames_per_s == pytest.approx(report.requests / report.seconds)
    lat = report.latency_ms
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert ticks and ticks[-1][1] == report.requests


def test_make_items_repeats_unique_signed_items():
    items = loadgen.make_items("secp256k1", 10, 3)
    assert len(items) == 10 and len({i.signature for i in items}) == 3


def test_cli_bench_writes_json(live_server, tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = cli.main(["bench", "--url", live_server.url, "--scheme", "ed25519", "--batch", "4", "--duration", "0.4",
                   "--concurrency", "2", "--transport", "ws", "--unique", "2", "--json", str(out)])
    assert rc == 0
    numbers = json.loads(out.read_text())
    assert numbers["config"]["transport"] == "ws" and numbers["requests"] > 0 and numbers["errors"] == 0
    assert numbers["items"] == 4 * numbers["requests"]
    assert "verifies/s" in capsys.readouterr().out


def test_cli_bench_fails_clearly_on_a_dead_url(tmp_path, capsys):
    rc = cli.main(["bench", "--url", "http://127.0.0.1:9", "--batch", "1", "--duration", "0.2", "--no-progress"])
    assert rc == 2
    assert "CONNECTION_FAILED" in capsys.readouterr().err


@pytest.mark.parametrize("transport", ["tcp", "udp", "quic"])
def test_ingest_transports_find_their_port_and_measure(ingest_server, transport):
    cfg = loadgen.BenchConfig(url=ingest_server.url, scheme="ed25519", batch=8, duration=0.5, concurrency=4,
                              transport=transport, unique=4)
    report = asyncio.run(loadgen.run(cfg))
    assert report.ok, report.first_error
    assert report.items == report.requests * 8 and report.verifies_per_s > 0


def test_ingest_bench_says_what_is_missing(live_server):
    cfg = loadgen.BenchConfig(url=live_server.url, batch=1, duration=0.2, transport="tcp")
    with pytest.raises(ConnectionFailed) as e:
        asyncio.run(loadgen.run(cfg))
    assert "ZAPVERIFY_INGEST_TCP_PORT" in e.value.message


def test_udp_frame_must_fit_a_datagram(ingest_server):
    cfg = loadgen.BenchConfig(url=ingest_server.url, batch=1024, duration=0.2, transport="udp", unique=2)
    with pytest.raises(RequestError) as e:
        asyncio.run(loadgen.run(cfg))
    assert e.value.field == "batch"


def test_cli_bench_over_tcp(ingest_server, capsys):
    rc = cli.main(["bench", "--url", ingest_server.url, "--batch", "4", "--duration", "0.3", "--concurrency", "2",
                   "--transport", "tcp", "--unique", "2", "--no-progress"])
    assert rc == 0 and "transport=tcp" in capsys.readouterr().out


def test_duration_bounds_the_whole_run(live_server):
    # 4,000 Ed25519 verifications cannot be answered in 10 ms (that would be 400 k/s on the
    # CPU backend), so the first request is still in flight when the duration runs out.
    import time

    cfg = loadgen.BenchConfig(url=live_server.url, scheme="ed25519", batch=4000, duration=0.01, concurrency=2,
                              transport="zap", unique=8)
    items = loadgen.make_items(cfg.scheme, cfg.batch, cfg.unique)
    t0 = time.perf_counter()
    report = asyncio.run(loadgen.run(cfg, items))
    assert time.perf_counter() - t0 < 2.0
    assert report.requests == 0 and not report.ok
    assert "within --duration" in report.first_error


def test_requests_in_flight_at_the_deadline_are_cut_not_counted(live_server):
    cfg = loadgen.BenchConfig(url=live_server.url, scheme="ed25519", batch=64, duration=2.0, concurrency=4,
                              transport="ws", unique=8)
    report = asyncio.run(loadgen.run(cfg, loadgen.make_items(cfg.scheme, cfg.batch, cfg.unique)))
    assert report.requests > 0 and report.errors == 0
    assert report.seconds < 2.0 + 0.5  # the clock stops at the deadline, not when the last reply lands
    assert report.items == report.requests * cfg.batch
