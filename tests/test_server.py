"""The API served by a real uvicorn process: verdicts, limits, and a server that survives bad input."""

import httpx
import pytest

from app.engine.reference import kat
from tests.server import running_server
from tests.test_routes_verify import as_json, five_scheme_items


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = {"ZAPVERIFY_MAX_ITEMS": "100", "ZAPVERIFY_MAX_BODY_BYTES": "300000",
           "ZAPVERIFY_MAX_MESSAGE_BYTES": "2048", "ZAPVERIFY_CPU_WORKERS": "2",
           "ZAPVERIFY_DATA_DIR": str(tmp_path_factory.mktemp("data"))}
    with running_server(env) as srv:
        yield srv


def test_real_server_verdicts_limits_and_survival(server):
    kas = five_scheme_items()
    good = {"items": [as_json(k.item) for k in kas]}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/v1/verify", json=good)
        assert r.status_code == 200 and r.json()["verdicts"] == [k.expected for k in kas]
        root = r.json()["merkle_root"]

        too_many = {"items": good["items"][:1] * 101}
        r = c.post("/v1/verify", json=too_many)
        assert r.status_code == 413 and r.json()["error"]["field"] == "items"

        big_msg = {"items": [dict(good["items"][0], message="00" * 3000)]}
        r = c.post("/v1/verify", json=big_msg)
        assert r.status_code == 413 and r.json()["error"]["field"] == "items[0].message"

        r = c.post("/v1/verify", content=b"x" * 400_000, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["field"] == "body"

        bad_hex = {"items": [dict(good["items"][0], signature="not-hex")]}
        r = c.post("/v1/verify", json=bad_hex)
        assert r.status_code == 422 and r.json()["error"]["field"] == "items[0].signature"

        r = c.post("/v1/verify", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422

        # Still serving, and the same batch gives the same root.
        r = c.post("/v1/verify", json=good)
        assert r.status_code == 200 and r.json()["merkle_root"] == root
        assert c.get("/healthz").status_code == 200
        assert c.get("/v1/status").json()["stats"]["schemes"]["ed25519"]["items"] >= 8


def test_real_server_dashboard_page(server):
    page = httpx.get(server.url + "/", timeout=10)
    assert page.status_code == 200 and "zapverify" in page.text
    assert kat  # generated items are shared with the in-process API tests
