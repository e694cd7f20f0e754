"""The OpenAPI schema says what the server does (scripts/schemathesis_check runs schemathesis
against a live server in CI; these are the cases it found, pinned): an empty item list is
schema-invalid, receipt ids are typed as UUIDs, the receipts 404s and the load-shedding
answers are documented."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from app.api.routes.receipts import UUID_PATTERN
from app.config import Settings
from app.engine.runtime import Runtime
from app.main import create_app


@pytest.fixture(scope="module")
def client(engine, tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("openapi"))
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        yield c


@pytest.fixture(scope="module")
def schema(client):
    return client.get("/openapi.json").json()


def _params(op: dict) -> dict[str, dict]:
    return {p["name"]: p["schema"] for p in op.get("parameters", [])}


def test_an_empty_item_list_is_schema_invalid_and_refused(schema, client):
    items = schema["components"]["schemas"]["VerifyRequest"]["properties"]["items"]
    assert items["minItems"] == 1
    r = client.post("/v1/verify", json={"items": []})
    assert r.status_code == 422 and r.json()["error"]["code"] == "EMPTY_BATCH"


def test_receipt_ids_are_typed_as_uuids(schema, client):
    paths = schema["paths"]
    for path, name in [("/v1/receipts/{receipt_id}", "receipt_id"),
                       ("/v1/receipts/{receipt_id}/proof/{index}", "receipt_id"), ("/v1/receipts", "after")]:
        param = _params(paths[path]["get"])[name]
        text = next(s for s in param.get("anyOf", [param]) if s.get("type") == "string")  # ?after= may be absent
        assert param.get("format", text.get("format")) == "uuid" and text["pattern"] == UUID_PATTERN, path
    r = client.get("/v1/receipts/not-a-uuid")
    assert r.status_code == 422 and r.json()["error"]["field"] == "receipt_id"


def test_receipts_404s_are_documented_and_answered(schema, client):
    for path in ("/v1/receipts", "/v1/receipts/{receipt_id}", "/v1/receipts/{receipt_id}/proof/{index}"):
        assert "404" in schema["paths"][path]["get"]["responses"], path
    r = client.get("/v1/receipts/01890a5d-ac96-774b-bcce-b302099a8057")
    assert r.status_code == 404 and r.json()["error"]["code"] == "RECEIPT_NOT_FOUND"


def test_load_shedding_answers_are_documented(schema):
    for path in ("/v1/verify", "/v1/verify/zap"):
        responses = schema["paths"][path]["post"]["responses"]
        assert {"408", "503"} <= set(responses), path
        assert "OVERLOADED" in responses["503"]["description"]
