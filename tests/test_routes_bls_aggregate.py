"""POST /v1/verify/bls-aggregate and the same request over WS /v1/ws/verify, through the real
app: verdicts, leaves and root, receipts and proofs, limits naming the field, the README example,
the client, and the per-mode counters of the dashboard and metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.engine.commit import merkle
from app.engine.runtime import Runtime
from app.main import create_app
from app.vectors import from_json, generated_aggregate
from zapverify import AggregateItem, Client, aggregate_body, aggregate_leaf, verify_inclusion

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def answers():
    return [from_json(r) for r in generated_aggregate(2, seed=3)]


@pytest.fixture(scope="module")
def client(engine, tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("agg"), bls_aggregate_max_keys=8,
                        bls_aggregate_max_pairings=64, max_message_bytes=100, instance="agg")
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        yield c


def test_verdicts_root_receipt_and_every_proof(client, answers):
    items = [a.item for a in answers]
    r = client.post("/v1/verify/bls-aggregate", json=aggregate_body(items))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["verdicts"] == [a.expected for a in answers]
    assert body["count"] == len(items) and body["valid"] == sum(a.expected for a in answers)
    assert body["backends"] == {"bls12-381-fast-aggregate": "cpu", "bls12-381-aggregate": "cpu"}
    root = bytes.fromhex(body["merkle_root"])
    assert root == merkle.root([aggregate_leaf(a.item, a.expected) for a in answers])
    rec = client.get(f"/v1/receipts/{body['batch_id']}").json()
    assert rec["merkle_root"] == body["merkle_root"] and rec["source"] == "http"
    assert rec["schemes"] == ["bls12-381-aggregate", "bls12-381-fast-aggregate"]
    for i, a in enumerate(answers):
        p = client.get(f"/v1/receipts/{body['batch_id']}/proof/{i}").json()
        leaf = aggregate_leaf(a.item, a.expected)
        assert p["leaf_hash"] == leaf.hex()
        path = [bytes.fromhex(h) for h in p["audit_path"]]
        assert verify_inclusion(root, leaf, i, len(items), path)
        assert not verify_inclusion(root, aggregate_leaf(a.item, not a.expected), i, len(items), path)


def test_readme_example_gives_true_false(client):
    text = README.read_text()
    body = re.search(r"/v1/verify/bls-aggregate -H 'content-type: application/json' -d '(\{.*?\})'", text,
                     re.S).group(1)
    r = client.post("/v1/verify/bls-aggregate", json=json.loads(body))
    assert r.status_code == 200, r.text
    assert r.json()["verdicts"] == [True, False]


def test_openapi_example_verifies(client):
    from app.api.bls_aggregate import EXAMPLE

    assert client.post("/v1/verify/bls-aggregate", json=EXAMPLE).json()["verdicts"] == [True]


def _item(mode="fast_aggregate", keys=1, **kw):
    d = {"mode": mode, "public_keys": ["97" + "00" * 47] * keys, "signature": "c0" + "00" * 95}
    d.update({"message": "00"} if mode == "fast_aggregate" else {"messages": ["00"] * keys})
    d.update(kw)
    return d


@pytest.mark.parametrize("items, status, field", [
    ([_item(keys=9)], 413, "items[0].public_keys"),
    ([_item("aggregate", keys=1, messages=["00"] * 9)], 413, "items[0].messages"),
    ([_item("aggregate", keys=1, messages=["00"] * 8)] * 8, 413, "items"),  # counted by messages
    ([_item(keys=8)] * 8, 413, "items"),  # 8 × (8 + 1) = 72 > 64 pairings
    ([_item(), _item(message="zz")], 422, "items[1].message"),
    ([_item("aggregate", keys=2, messages=["00", "0g"])], 422, "items[0].messages[1]"),
    ([_item(public_keys=["00", "xyz"])], 422, "items[0].public_keys[1]"),
    ([_item(signature="nothex")], 422, "items[0].signature"),
    ([_item(message="00" * 101)], 413, "items[0].message"),
    ([_item(messages=["00"])], 422, "items[0].message"),
    ([_item("aggregate", message="00")], 422, "items[0].messages"),
    ([_item(mode="threshold")], 422, "items[0].mode"),
    ([], 422, "items"),
])
def test_errors_name_the_field(client, items, status, field):
    r = client.post("/v1/verify/bls-aggregate", json={"items": items})
    assert r.status_code == status, r.text
    assert r.json()["error"]["field"] == field


def test_bad_bytes_are_false_not_errors(client):
    items = [_item(keys=0), _item("aggregate", keys=2, messages=["00"]), _item(public_keys=["c0" + "00" * 47])]
    r = client.post("/v1/verify/bls-aggregate", json={"items": items})
    assert r.status_code == 200 and r.json()["verdicts"] == [False, False, False]


def test_websocket_json_request_and_receipt(client, answers):
    with client.websocket_connect("/v1/ws/verify") as ws:
        ws.send_text(json.dumps({"request_id": "agg-1", **aggregate_body([a.item for a in answers])}))
        body = json.loads(ws.receive_text())
        assert body["request_id"] == "agg-1" and body["verdicts"] == [a.expected for a in answers]
        ws.send_text(json.dumps({"request_id": 2, "items": [_item(keys=9)]}))
        err = json.loads(ws.receive_text())
        assert err["request_id"] == 2 and err["error"]["field"] == "items[0].public_keys"
    assert client.get(f"/v1/receipts/{body['batch_id']}").json()["source"] == "ws"


def test_dashboard_status_and_metrics_count_each_mode(engine, client, answers):
    before = {k: v.items for k, v in engine.stats.schemes.items()}
    client.post("/v1/verify/bls-aggregate", json=aggregate_body([a.item for a in answers]))
    per_mode = {"bls12-381-fast-aggregate": 0, "bls12-381-aggregate": 0}
    for a in answers:
        per_mode["bls12-381-" + a.item.mode.replace("_", "-")] += 1
    for label, n in per_mode.items():
        assert engine.stats.schemes[label].items - before.get(label, 0) == n
    shown = client.get("/v1/status").json()["stats"]["schemes"]  # what the dashboard draws
    assert all(shown[label]["items"] >= n for label, n in per_mode.items())
    metrics = client.get("/metrics").text
    assert 'zapverify_signatures_total{backend="cpu",result="valid",scheme="bls12-381-fast-aggregate"}' in metrics
    assert 'scheme="bls12-381-aggregate"' in metrics


def test_python_clients_blocking_and_async(live_server, answers):
    import asyncio

    from zapverify import AsyncClient

    want = [a.expected for a in answers]
    root = merkle.root([aggregate_leaf(a.item, a.expected) for a in answers])
    with Client(live_server.url) as zv:
        r = zv.verify_bls_aggregate([a.item for a in answers])
    assert r.verdicts == want and r.merkle_root == root

    async def run():
        async with AsyncClient(live_server.url) as zv:
            return await zv.verify_bls_aggregate([a.item for a in answers])

    r = asyncio.run(run())
    assert r.verdicts == want and r.merkle_root == root and isinstance(answers[0].item, AggregateItem)
