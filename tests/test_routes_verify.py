"""REST API in process: verdicts, errors that name the field, limits, status, dashboard."""

import base64
import json

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.core.schemes import SCHEMES
from app.engine.commit import merkle
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.main import create_app


@pytest.fixture(scope="module")
def client(engine):
    settings = Settings(max_items=50, max_body_bytes=200_000, max_message_bytes=1000, instance="test-1")
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        yield c


def as_json(item, enc="hex"):
    f = (lambda b: b.hex()) if enc == "hex" else (lambda b: base64.b64encode(b).decode())
    d = {"scheme": item.scheme, "public_key": f(item.public_key), "message": f(item.message),
         "signature": f(item.signature)}
    if item.context:
        d["context"] = f(item.context)
    return d


def five_scheme_items():
    out = []
    for s in ("ed25519", "secp256k1", "bls12-381", "ml-dsa-44", "slh-dsa-sha2-128f"):
        out += [ka for ka in kat.known_answers()[s] if not ka.item.prehashed][:4]
    return out


@pytest.mark.parametrize("enc", ["hex", "base64"])
def test_mixed_five_scheme_batch(client, enc):
    kas = five_scheme_items()
    r = client.post("/v1/verify", json={"encoding": enc, "items": [as_json(k.item, enc) for k in kas]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["verdicts"] == [k.expected for k in kas]
    assert body["valid"] == sum(k.expected for k in kas) and body["count"] == len(kas)
    leaves = [merkle.leaf_hash(SCHEMES[k.item.scheme].code, k.expected, k.item.public_key, k.item.message,
                               k.item.signature) for k in kas]
    assert body["merkle_root"] == merkle.root(leaves).hex()
    assert body["backends"]["ed25519"] == "cpu"
    assert r.headers["X-Zapverify-Instance"] == "test-1"
    assert len(body["batch_id"]) == 36


def test_der_signatures_when_the_request_says_so(client):
    import coincurve

    item = kat.sign_items("secp256k1", 1, seed=12)[0]
    der = coincurve.PrivateKey(b"\x01" * 32).sign(item.message)  # a real DER signature of another key
    pk = coincurve.PrivateKey(b"\x01" * 32).public_key.format()
    req = {"signature_format": "der", "items": [
        {"scheme": "secp256k1", "public_key": pk.hex(), "message": item.message.hex(), "signature": der.hex()},
        {"scheme": "secp256k1", "public_key": pk.hex(), "message": item.message.hex(), "signature": "3000"}]}
    assert client.post("/v1/verify", json=req).json()["verdicts"] == [True, False]
    # Without the flag the same DER bytes are read as compact r||s and fail.
    req["signature_format"] = "raw"
    assert client.post("/v1/verify", json=req).json()["verdicts"] == [False, False]


def test_prehashed_and_allow_high_s_flags(client):
    item = kat.sign_items("secp256k1", 1, seed=13, prehashed=True)[0]
    req = {"prehashed": True, "items": [as_json(item)]}
    assert client.post("/v1/verify", json=req).json()["verdicts"] == [True]
    n = SCHEMES and 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
    s = int.from_bytes(item.signature[32:], "big")
    high = kat.Item("secp256k1", item.public_key, item.message, item.signature[:32] + (n - s).to_bytes(32, "big"))
    req = {"prehashed": True, "items": [as_json(high)]}
    assert client.post("/v1/verify", json=req).json()["verdicts"] == [False]
    req["allow_high_s"] = True
    assert client.post("/v1/verify", json=req).json()["verdicts"] == [True]


def test_wrong_lengths_are_false_verdicts_not_errors(client):
    item = kat.known_answers()["ed25519"][0].item
    bad = as_json(item)
    bad["public_key"] = "00"
    r = client.post("/v1/verify", json={"items": [as_json(item), bad]})
    assert r.status_code == 200 and r.json()["verdicts"] == [True, False]


@pytest.mark.parametrize("mutate,status,field,code", [
    (lambda d: d["items"][1].pop("signature"), 422, "items[1].signature", "BAD_REQUEST"),
    (lambda d: d["items"][1].update(public_key="xyz"), 422, "items[1].public_key", "BAD_ENCODING"),
    (lambda d: d["items"][1].update(scheme="rsa-2048"), 422, "items[1].scheme", "UNKNOWN_SCHEME"),
    (lambda d: d["items"][1].update(context="00"), 422, "items[1].context", "BAD_REQUEST"),
    (lambda d: d["items"][1].update(message="00" * 1001), 413, "items[1].message", "LIMIT_EXCEEDED"),
    (lambda d: d.update(items=d["items"] * 26), 413, "items", "LIMIT_EXCEEDED"),
    (lambda d: d.update(items=[]), 422, "items", "EMPTY_BATCH"),
    (lambda d: d.update(encoding="base58"), 422, "encoding", "BAD_REQUEST"),
])
def test_unreadable_requests_name_the_field(client, mutate, status, field, code):
    item = as_json(kat.known_answers()["ed25519"][0].item)
    req = {"items": [dict(item), dict(item)]}
    mutate(req)
    r = client.post("/v1/verify", json=req)
    assert r.status_code == status, r.text
    assert r.json()["error"]["field"] == field and r.json()["error"]["code"] == code


def test_body_limit_is_413(client):
    r = client.post("/v1/verify", content=b"{" + b" " * 300_000 + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["field"] == "body"


def test_schemes_status_health_and_dashboard(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    schemes = client.get("/v1/schemes").json()["schemes"]
    assert len(schemes) == len(SCHEMES) and schemes[0]["id"] == "ed25519"
    by = {s["id"]: s for s in schemes}  # what a client needs to build a request of each
    assert by["p256"]["options"] == ["prehashed", "low_s"] and by["p256"]["signature_formats"] == ["raw", "der"]
    assert by["bip340"]["options"] == [] and by["bip340"]["signature_formats"] == ["raw"]
    assert by["bip340"]["public_key_bytes"] == [32] and by["p256"]["code"] == 4 and by["bip340"]["code"] == 5
    st = client.get("/v1/status").json()
    assert st["engine"]["ready"] and st["engine"]["schemes"]["ed25519"]["selftest"]["cpu"] is True
    assert st["host"]["cpus"] >= 1 and st["limits"]["max_items"] == 50
    page = client.get("/")
    head = page.text.split("<script>")[0].lower().replace("http-equiv", "")
    assert page.status_code == 200 and "/v1/status" in page.text and "http" not in head


def test_openapi_has_examples_for_each_endpoint(client):
    spec = client.get("/openapi.json").json()
    for path in ("/v1/verify", "/v1/schemes", "/v1/status", "/healthz", "/readyz"):
        assert "example" in str(spec["paths"][path]) or "examples" in str(spec["paths"][path]), path


def test_openapi_request_examples_verify_true(client):
    spec = client.get("/openapi.json").json()
    examples = spec["paths"]["/v1/verify"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    for name, ex in examples.items():
        r = client.post("/v1/verify", json=ex["value"])
        assert r.json()["verdicts"] == [True], name


def test_readme_curl_example_gives_true_false(client):
    import json
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    body = re.search(r"-d '(\{.*?\})'", readme, re.S).group(1)
    r = client.post("/v1/verify", json=json.loads(body))
    assert r.json()["verdicts"] == [True, False]


def test_chunked_body_over_the_limit_is_413_naming_the_body(client):
    def chunks():
        yield b'{"items": ['
        for _ in range(300):
            yield b" " * 1000
        yield b"]}"

    r = client.post("/v1/verify", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["field"] == "body"


def test_errors_outside_the_routes_use_the_same_shape(client):
    r = client.get("/v1/verify")
    assert r.status_code == 405 and r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    r = client.get("/no/such/path")
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    r = client.post("/v1/verify", content=b'{"items": [', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"] == {
        "code": "BAD_JSON", "message": r.json()["error"]["message"], "field": "body"}


def test_api_docs_are_served_without_a_cdn(client):
    page = client.get("/docs").text
    assert "cdn." not in page and "unpkg" not in page
    js = [src for src in __import__("re").findall(r'src="([^"]+)"', page)]
    assert js and all(client.get(src).status_code == 200 for src in js)


# ------------------------------------------------------------------ what a new user got wrong (issue 14)
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_not_declared_json_is_415_naming_the_header(client, content_type):
    headers = {"content-type": content_type} if content_type else {}
    r = client.post("/v1/verify", content=b'{"items": []}', headers=headers)
    assert r.status_code == 415
    assert r.json()["error"] == {"code": "BAD_CONTENT_TYPE", "message": "Content-Type must be application/json",
                                 "field": "content-type"}


def test_json_with_a_charset_parameter_is_accepted(client):
    item = as_json(kat.known_answers()["ed25519"][0].item)
    r = client.post("/v1/verify", content=f'{{"items": [{json.dumps(item)}]}}'.encode(),
                    headers={"content-type": "application/json; charset=utf-8"})
    assert r.status_code == 200 and r.json()["verdicts"] == [True]


@pytest.mark.parametrize("body,why", [(b'{"items": "\xff\xfe"}', "not UTF-8"),
                                      (b"[" * 100_000 + b"]" * 100_000, "nested too deeply")],
                         ids=["not-utf8", "nested-past-the-parser"])
def test_unreadable_json_names_the_body(client, body, why):
    r = client.post("/v1/verify", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "BAD_JSON" and r.json()["error"]["field"] == "body"
    message = r.json()["error"]["message"]
    assert why in message and "Error" not in message, message  # in words, not an exception's name


def test_hex_with_spaces_is_refused_naming_the_field(client):
    item = as_json(kat.known_answers()["ed25519"][0].item)
    spaced = dict(item, signature=" ".join(item["signature"][i:i + 2] for i in range(0, len(item["signature"]), 2)))
    for items in ([spaced], [item, spaced]):  # one item, and the second of two
        r = client.post("/v1/verify", json={"items": items})
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "BAD_ENCODING" and err["field"] == f"items[{len(items) - 1}].signature"
        assert "whitespace" in err["message"]


@pytest.mark.parametrize("field", ["prehashed", "allow_high_s"])
@pytest.mark.parametrize("value", ["yes", 1, 0, "true", None])
def test_booleans_are_strict(client, field, value):
    item = as_json(kat.known_answers()["ed25519"][0].item)
    r = client.post("/v1/verify", json={"items": [item], field: value})
    assert r.status_code == 422 and r.json()["error"]["field"] == field


@pytest.mark.parametrize("option, takers", [("prehashed", "secp256k1/p256"), ("allow_high_s", "secp256k1"),
                                            ("low_s", "p256")])
def test_an_option_no_item_takes_is_refused_naming_it(client, option, takers):
    # Issue 53: "prehashed": true on an Ed25519-only request answered plain Ed25519 verdicts.
    items = [as_json(kat.known_answers()[s][0].item) for s in ("ed25519", "bip340")]
    r = client.post("/v1/verify", json={"items": items, option: True})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "BAD_REQUEST" and err["field"] == option
    assert err["message"] == f"option {option} applies to {takers} only, and this request's items are ed25519/bip340"


def test_an_option_some_items_take_applies_to_those(client):
    k1 = kat.sign_items("secp256k1", 1, seed=13, prehashed=True)[0]
    ed = kat.known_answers()["ed25519"][0]
    r = client.post("/v1/verify", json={"prehashed": True, "items": [as_json(k1), as_json(ed.item)]})
    assert r.status_code == 200 and r.json()["verdicts"] == [True, ed.expected]


def test_a_signature_format_no_item_takes_is_refused_naming_it(client):
    item = as_json(kat.known_answers()["ed25519"][0].item)
    r = client.post("/v1/verify", json={"items": [item], "signature_format": "der"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "signature_format"
    assert "secp256k1/p256 only" in r.json()["error"]["message"]


def test_a_scheme_id_in_the_wrong_case_gets_a_hint(client):
    item = {**as_json(kat.known_answers()["ed25519"][0].item), "scheme": "Ed25519"}
    r = client.post("/v1/verify", json={"items": [item]})
    err = r.json()["error"]
    assert r.status_code == 422 and err["code"] == "UNKNOWN_SCHEME" and err["field"] == "items[0].scheme"
    assert "case-sensitive: did you mean 'ed25519'?" in err["message"] and "known: ed25519, secp256k1" in err["message"]


def test_too_many_items_are_refused_before_any_item_is_validated(client):
    # Issue 53: 65,537 items were validated (2.4 s) before their 413.  Items that would each
    # fail validation show that none was looked at: the answer is the count's 413, not a 422.
    r = client.post("/v1/verify", json={"items": [{"scheme": 7}] * 51})
    assert r.status_code == 413, r.text
    assert r.json()["error"] == {"code": "LIMIT_EXCEEDED", "message": "51 items, the limit is 50", "field": "items"}
    r = client.post("/v1/verify", json={"items": [{"scheme": 7}] * 50})  # at the limit: validated, 422
    assert r.status_code == 422 and r.json()["error"]["field"] == "items[0].scheme"
