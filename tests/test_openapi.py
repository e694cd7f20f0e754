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


ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}


def _operations(schema):
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            yield path, method, op


def test_access_control_is_described_where_the_server_applies_it(schema):
    from app.api.security import required_scope

    schemes = schema["components"]["securitySchemes"]
    assert schemes["bearerAuth"]["type"] == "http" and schemes["bearerAuth"]["scheme"] == "bearer"
    assert (schemes["apiKeyHeader"]["type"], schemes["apiKeyHeader"]["in"], schemes["apiKeyHeader"]["name"]) == \
        ("apiKey", "header", "X-API-Key")
    scoped = set()
    for path, _method, op in _operations(schema):
        scope = required_scope(path)
        if scope is None:
            assert "security" not in op, path
            continue
        scoped.add(scope)
        # This server has no keys: a key is accepted, not needed ({} is the anonymous alternative).
        assert op["security"] == [{}, {"bearerAuth": []}, {"apiKeyHeader": []}], path
        assert f"`{scope}` scope" in op["description"], path
        for status in ("401", "403", "429"):
            assert op["responses"][status]["content"]["application/json"]["schema"] == ERROR_REF, (path, status)
        assert "Retry-After" in op["responses"]["429"]["headers"]
    assert scoped == {"verify", "receipts", "admin"}
    # 503 with the error schema wherever the server answers one in JSON (the ZAP route answers a frame).
    for path, method in [("/v1/verify", "post"), ("/v1/verify/bls-aggregate", "post"), ("/v1/receipts", "get"),
                         ("/v1/receipts/{receipt_id}", "get"), ("/v1/receipts/{receipt_id}/proof/{index}", "get")]:
        assert schema["paths"][path][method]["responses"]["503"]["content"]["application/json"]["schema"] == \
            ERROR_REF, path


def test_a_server_with_keys_requires_one_in_its_schema_and_docs_can_authorize(engine):
    from app.api import security

    settings = Settings(receipts=False, api_keys=[f"{security.key_digest('zv-openapi-key-0123456789')}:verify"])
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        schema = c.get("/openapi.json").json()
        assert c.get("/docs").status_code == 200  # Swagger UI shows Authorize when securitySchemes exist
    assert set(schema["components"]["securitySchemes"]) == {"bearerAuth", "apiKeyHeader"}
    assert schema["paths"]["/v1/verify"]["post"]["security"] == [{"bearerAuth": []}, {"apiKeyHeader": []}]
    assert schema["paths"]["/metrics"]["get"]["security"] == [{"bearerAuth": []}, {"apiKeyHeader": []}]
    assert "security" not in schema["paths"]["/healthz"]["get"]
