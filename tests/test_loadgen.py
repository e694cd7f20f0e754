"""app/loadgen.py (``zapverify bench``) against a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from app import cli, loadgen


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
