"""Access control (app/api/security.py): API keys and scopes, rate limits, WebSocket origins,
trusted hosts, security headers."""

from __future__ import annotations

import logging
import re
import time

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.api import security
from app.config import Settings
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.main import create_app
from app.wire import zap

VERIFY_KEY, RECEIPTS_KEY, ADMIN_KEY = "zv-test-verify-0123456789", "zv-test-receipts-0123456789", "zv-admin-01234"
KEYS = [f"{security.key_digest(VERIFY_KEY)}:verify:verifier", f"{security.key_digest(RECEIPTS_KEY)}:receipts",
        f"{security.key_digest(ADMIN_KEY)}:verify+receipts+admin:ops"]


def _frame(rid: int) -> bytes:
    it = kat.known_answers()["ed25519"][0].item
    return bytes(zap.encode_items("ed25519", [it.public_key], [it.message], [it.signature], request_id=rid))


def _item():
    it = kat.known_answers()["ed25519"][0].item
    return {"items": [{"scheme": "ed25519", "public_key": it.public_key.hex(), "message": it.message.hex(),
                       "signature": it.signature.hex()}]}


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(Settings(api_keys=KEYS, receipts=False), runtime=Runtime(engine))) as c:
        yield c


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def test_verify_needs_a_key_and_names_the_header(client):
    r = client.post("/v1/verify", json=_item())
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    assert r.json()["error"] == {"code": "UNAUTHORIZED", "field": "authorization",
                                 "message": "an API key is required: Authorization: Bearer <key>"}
    assert client.post("/v1/verify", json=_item(), headers=bearer("not-a-key")).json()["error"]["message"] == \
        "unknown API key"


@pytest.mark.parametrize("headers, query", [(bearer(VERIFY_KEY), ""), ({"X-API-Key": VERIFY_KEY}, ""),
                                            ({}, f"?access_token={VERIFY_KEY}")], ids=["bearer", "x-api-key", "query"])
def test_a_verify_key_verifies(client, headers, query):
    r = client.post("/v1/verify" + query, json=_item(), headers=headers)
    assert r.status_code == 200 and r.json()["verdicts"] == [True]


@pytest.mark.parametrize("path, key, status", [
    ("/v1/receipts", VERIFY_KEY, 403), ("/v1/receipts", RECEIPTS_KEY, 404),  # past the check: receipts are off here
    ("/metrics", RECEIPTS_KEY, 403), ("/metrics", ADMIN_KEY, 200), ("/v1/status", VERIFY_KEY, 403),
    ("/v1/status", ADMIN_KEY, 200),
])
def test_scopes(client, path, key, status):
    r = client.get(path, headers=bearer(key))
    assert r.status_code == status, r.text
    if status == 403:
        assert r.json()["error"]["code"] == "FORBIDDEN"


def test_refusals_of_the_middlewares_say_which_instance_answered(client):
    """X-Zapverify-Instance on every response (docs/operations.md): the 401 of the key check
    and the 413 of the body limit are made before any route (they had none)."""
    refusals = [client.get("/v1/status"),
                client.post("/v1/verify", content=b"x" * (1 << 27), headers={**bearer(VERIFY_KEY),
                                                                            "content-type": "application/json"})]
    assert [r.status_code for r in refusals] == [401, 413]
    assert all(r.headers.get("x-zapverify-instance") for r in refusals)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/v1/schemes", "/v1/info", "/openapi.json", "/docs", "/"])
def test_open_paths_need_no_key(client, path):
    assert client.get(path).status_code == 200


def test_the_verify_websocket_needs_a_key(client):
    with pytest.raises(WebSocketDisconnect) as info, client.websocket_connect("/v1/ws/verify") as ws:
        ws.receive_text()
    assert info.value.code == 1008
    with client.websocket_connect(f"/v1/ws/verify?access_token={VERIFY_KEY}") as ws:
        ws.send_json({"request_id": 1, **_item()})
        assert ws.receive_json()["verdicts"] == [True]


def test_a_key_past_its_rate_gets_429_with_retry_after(engine):
    settings = Settings(api_keys=KEYS, receipts=False, rate_limit_per_second=0.5, rate_limit_burst=2)
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        codes = [c.get("/metrics", headers=bearer(ADMIN_KEY)).status_code for _ in range(2)]
        r = c.get("/metrics", headers=bearer(ADMIN_KEY))
        assert codes == [200, 200] and r.status_code == 429
        assert int(r.headers["retry-after"]) >= 1 and r.json()["error"]["code"] == "RATE_LIMITED"
        assert c.post("/v1/verify", json=_item(), headers=bearer(VERIFY_KEY)).status_code == 200  # its own bucket


def test_token_bucket_refills_at_its_rate():
    b = security.TokenBuckets(rate=2.0, burst=1)
    assert b.take("k", now=0.0) == 0.0
    assert b.take("k", now=0.1) == pytest.approx(0.4)
    assert b.take("k", now=0.5) == 0.0


@pytest.mark.parametrize("origin, allowed", [(None, True), ("http://testserver", True),
                                             ("http://evil.example", False), ("http://ok.example", True)])
def test_websocket_origins(engine, origin, allowed):
    settings = Settings(receipts=False, allowed_origins=["http://ok.example"])
    headers = {"origin": origin} if origin else {}
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        if allowed:
            with c.websocket_connect("/v1/ws/stats", headers=headers) as ws:
                assert "engine" in ws.receive_json()
        else:
            with pytest.raises(WebSocketDisconnect) as info, c.websocket_connect("/v1/ws/stats", headers=headers):
                pass
            assert info.value.code == 1008


def test_a_loopback_server_refuses_foreign_host_headers(engine):
    # DNS rebinding: a page at evil.example resolving to 127.0.0.1 sends Host: evil.example.
    settings = Settings(receipts=False, host="127.0.0.1", allowed_hosts=[])
    assert settings.trusted_hosts[:2] == ["127.0.0.1", "localhost"]
    with TestClient(create_app(settings, runtime=Runtime(engine)), base_url="http://127.0.0.1:8000") as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/healthz", headers={"host": "evil.example"}).status_code == 400
    assert Settings(host="0.0.0.0", allowed_hosts=[]).trusted_hosts == ["*"]


def test_the_dashboard_sends_security_headers(client):
    h = client.get("/").headers
    assert "frame-ancestors 'none'" in h["content-security-policy"]
    assert (h["x-content-type-options"], h["x-frame-options"], h["referrer-policy"]) == ("nosniff", "DENY",
                                                                                          "no-referrer")


def test_open_bind_without_keys_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="zapverify.security"):
        assert security.warn_if_open(Settings(host="0.0.0.0"), [])
        assert not security.warn_if_open(Settings(host="127.0.0.1"), [])
        assert not security.warn_if_open(Settings(host="0.0.0.0"), [security.parse_key(KEYS[0])])
    assert "no API keys" in caplog.text


@pytest.mark.parametrize("entry", ["abc:verify", f"{'0' * 64}:root", f"{'0' * 64}", f"{'0' * 64}:verify:a:b"])
def test_bad_key_entries_are_refused(entry):
    with pytest.raises(ValueError):
        security.parse_key(entry)


def test_keys_from_a_secret_file(tmp_path):
    f = tmp_path / "keys"
    f.write_text(f"# ops keys\n{KEYS[2]}\n\n{KEYS[0]}  # the verifier\n")
    keys = security.load_keys(Settings(api_keys_file=f))
    assert [k.name for k in keys] == ["ops", "verifier"]
    ring = security.KeyRing(keys)
    assert ring.lookup(VERIFY_KEY).scopes == {"verify"} and ring.lookup(RECEIPTS_KEY) is None


# ------------------------------------------------------------- WebSockets: per-message rate, key in the subprotocol
def test_the_rate_limit_is_charged_per_websocket_message(engine):
    # A token every 100 s: no refill within the test, however slow the machine (at 5 a second a
    # token refilled between the last message and the ZAP frame on a busy machine).
    settings = Settings(api_keys=KEYS, receipts=False, rate_limit_per_second=0.01, rate_limit_burst=10)
    sent = 200
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c, \
            c.websocket_connect("/v1/ws/verify", headers=bearer(VERIFY_KEY)) as ws:
        t0 = time.monotonic()
        for i in range(sent):
            ws.send_json({"request_id": i, **_item()})
        replies = [ws.receive_json() for _ in range(sent)]
        elapsed = time.monotonic() - t0
        # A ZAP frame is charged too: its error frame carries RATE_LIMITED (wire code 0x0022).
        ws.send_bytes(_frame(4242))
        frame = zap.decode(ws.receive_bytes())
    assert sorted(r["request_id"] for r in replies) == list(range(sent))  # every message answered
    served = [r for r in replies if "verdicts" in r]
    limited = [r for r in replies if r.get("error", {}).get("code") == "RATE_LIMITED"]
    assert len(served) + len(limited) == sent
    # The connection took one token of the burst of 10; the bucket refills at 0.01 a second.
    assert 1 <= len(served) <= 10 - 1 + 0.01 * elapsed + 1
    assert all(r["error"]["retry_after"] > 0 for r in limited)
    assert isinstance(frame, zap.ErrorFrame) and frame.request_id == 4242 and frame.name == "RATE_LIMITED"


def test_a_browser_websocket_passes_its_key_in_the_subprotocol(client):
    protocols = [security.SUBPROTOCOL, security.subprotocol_key(ADMIN_KEY)]
    with client.websocket_connect("/v1/ws/stats", subprotocols=protocols) as ws:
        assert ws.accepted_subprotocol == security.SUBPROTOCOL  # the key-bearing one is never echoed
        assert "engine" in ws.receive_json()
    with client.websocket_connect("/v1/ws/verify",
                                  subprotocols=[security.SUBPROTOCOL, security.subprotocol_key(VERIFY_KEY)]) as ws:
        assert ws.accepted_subprotocol == security.SUBPROTOCOL
        ws.send_json({"request_id": 1, **_item()})
        assert ws.receive_json()["verdicts"] == [True]
    for bad in (security.subprotocol_key("not-a-key"), security.KEY_SUBPROTOCOL + "!!not base64!!",
                security.subprotocol_key(RECEIPTS_KEY)):  # unknown, unreadable, lacking the admin scope
        with pytest.raises(WebSocketDisconnect) as info, \
                client.websocket_connect("/v1/ws/stats", subprotocols=[security.SUBPROTOCOL, bad]):
            pass
        assert info.value.code == 1008


def test_a_key_with_any_characters_survives_the_subprotocol_encoding():
    key = "zv-ключ/+=: key"
    proto = security.subprotocol_key(key)
    assert re.fullmatch(r"zapverify\.key\.[A-Za-z0-9_-]+", proto)  # an HTTP token, as the header needs
    scope = {"type": "websocket", "headers": [], "query_string": b"", "subprotocols": ["zapverify.v1", proto]}
    assert security.presented_key(scope) == key


def test_the_dashboard_sends_its_key_in_the_subprotocol_not_the_url(client):
    page = client.get("/").text
    feed = page[page.index("function keyProtocols"):page.index("connect();\n</script>")]
    assert "access_token" not in page and "?key" not in feed
    assert '"zapverify.v1", "zapverify.key."' in feed and "/v1/ws/stats`,\n" in feed


def test_an_admin_only_key_opens_the_receipts_the_dashboard_links_to(engine, tmp_path):
    """The dashboard asks for an admin key and links every batch to its receipt: that key
    reads receipts (issue 53: an admin-only key got FORBIDDEN on the receipt panel)."""
    admin_only = "zv-admin-only-0123456789"
    keys = [*KEYS, f"{security.key_digest(admin_only)}:admin:dash"]
    assert security.parse_key(keys[-1]).scopes == {"admin", "receipts"}
    with TestClient(create_app(Settings(api_keys=keys, data_dir=tmp_path), runtime=Runtime(engine))) as c:
        batch = c.post("/v1/verify", json=_item(), headers=bearer(VERIFY_KEY)).json()["batch_id"]
        r = c.get(f"/v1/receipts/{batch}", headers=bearer(admin_only))
        assert r.status_code == 200 and r.json()["id"] == batch
        assert c.get(f"/v1/receipts/{batch}/proof/0", headers=bearer(admin_only)).status_code == 200
        assert c.get(f"/v1/receipts/{batch}", headers=bearer(VERIFY_KEY)).status_code == 403
        assert c.post("/v1/verify", json=_item(), headers=bearer(admin_only)).status_code == 403  # not verify


def test_info_tells_a_client_what_it_needs_and_nothing_of_the_host(client):
    from app import __version__, build

    body = client.get("/v1/info").json()  # no key: open, like /healthz
    assert body["name"] == "zapverify" and body["version"] == __version__ and body["commit"] == build.commit()
    assert body["schemes"][:2] == ["ed25519", "secp256k1"] and "cpu" in body["backends"]
    assert body["limits"]["max_items"] == Settings().max_items and body["receipts"] is False
    assert set(body) == {"name", "version", "commit", "api", "schemes", "backends", "receipts", "limits"}
    status = client.get("/v1/status", headers=bearer(ADMIN_KEY)).json()
    for secret in (status["instance"], status["host"]["python"], str(status["host"]["cpus"]) + ","):
        assert secret not in client.get("/v1/info").text
