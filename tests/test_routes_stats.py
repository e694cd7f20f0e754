"""WebSocket /v1/ws/stats: a snapshot at once and then every second, as /v1/status plus
the recent batches with their receipt links."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.api.routes import stats as stats_routes
from app.config import Settings
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.main import create_app


@pytest.fixture(scope="module")
def client(engine, tmp_path_factory):
    settings = Settings(instance="ws-1", data_dir=tmp_path_factory.mktemp("data"))
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        yield c


def test_feed_pushes_status_snapshots_with_recent_batches(client, monkeypatch):
    monkeypatch.setattr(stats_routes, "PUSH_SECONDS", 0.05)  # keep the test quick; the cadence is not under test
    kas = kat.known_answers()["bls12-381"]
    items = [{"scheme": "bls12-381", "public_key": k.item.public_key.hex(), "message": k.item.message.hex(),
              "signature": k.item.signature.hex()} for k in kas]
    r = client.post("/v1/verify", json={"items": items})
    assert r.status_code == 200, r.text
    batch = r.json()
    status = client.get("/v1/status").json()
    with client.websocket_connect("/v1/ws/stats") as ws:
        first, second = ws.receive_json(), ws.receive_json()
    assert set(status) <= set(first) and first["receipts"] is True
    assert second["time"] > first["time"]
    assert first["instance"] == "ws-1" and first["engine"]["schemes"] == status["engine"]["schemes"]
    newest = first["stats"]["recent"][0]
    assert newest["batch_id"] == batch["batch_id"] and newest["receipt"] == f"/v1/receipts/{batch['batch_id']}"
    assert newest["count"] == len(items) and newest["valid"] == batch["valid"]
    assert newest["schemes"] == {"bls12-381": len(items)} and newest["source"] == "http"
    assert client.get(newest["receipt"]).status_code == 200


def test_batches_without_receipts_have_no_link(engine, tmp_path):
    settings = Settings(instance="ws-2", data_dir=tmp_path, receipts=False)
    ka = kat.known_answers()["ed25519"][0]
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        body = {"items": [{"scheme": "ed25519", "public_key": ka.item.public_key.hex(),
                           "message": ka.item.message.hex(), "signature": ka.item.signature.hex()}]}
        batch_id = c.post("/v1/verify", json=body).json()["batch_id"]
        with c.websocket_connect("/v1/ws/stats") as ws:
            snap = ws.receive_json()
    assert snap["receipts"] is False
    mine = [r for r in snap["stats"]["recent"] if r["batch_id"] == batch_id]
    assert mine and mine[0]["receipt"] is None


def test_status_has_request_latency_and_http_errors_for_the_dashboard(client):
    """The dashboard's latency and errors panel reads ``stats.latency`` and ``http_errors``."""
    def errors() -> int:
        return sum(e["count"] for e in client.get("/v1/status").json()["http_errors"]
                   if (e["route"], e["code"]) == ("/v1/verify", "BAD_REQUEST"))

    before = errors()
    assert client.post("/v1/verify", json={"items": [{"scheme": "ed25519"}]}).status_code == 422
    ka = kat.known_answers()["ed25519"][0]
    assert client.post("/v1/verify", json={"items": [{"scheme": "ed25519", "public_key": ka.item.public_key.hex(),
                                                      "message": ka.item.message.hex(),
                                                      "signature": ka.item.signature.hex()}]}).status_code == 200
    status = client.get("/v1/status").json()
    assert errors() == before + 1
    http = status["stats"]["latency"]["http"]
    assert http["count"] >= 1 and 0 < http["p50_ms"] <= http["p99_ms"] <= http["max_ms"]
