"""GET /v1/receipts… and the receipt hook of POST /v1/verify, through the real app."""

from __future__ import annotations

import random

import nacl.signing
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.core.schemes import SCHEMES
from app.engine.receipts.ids import new_batch_id
from app.engine.receipts.open import open_store
from app.engine.runtime import Runtime
from app.engine.verify.engine import Engine
from app.main import create_app
from zapverify import leaf_hash, verify_inclusion


def _items(rng: random.Random, n: int, bad: set[int] = frozenset()):
    sk = nacl.signing.SigningKey(rng.randbytes(32))
    pk = sk.verify_key.encode()
    out = []
    for i in range(n):
        msg = rng.randbytes(rng.randrange(0, 40))
        sig = sk.sign(msg).signature
        if i in bad:
            msg += b"\x01"
        out.append((pk, msg, sig))
    return out


def _request(items) -> dict:
    return {"items": [{"scheme": "ed25519", "public_key": pk.hex(), "message": m.hex(), "signature": s.hex()}
                      for pk, m, s in items]}


@pytest.fixture
def make_client(tmp_path):
    clients = []

    def make(**settings):
        engine = Engine()
        engine.start()
        app = create_app(Settings(data_dir=tmp_path, instance="t", **settings), runtime=Runtime(engine))
        client = TestClient(app)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def test_verify_writes_a_receipt_and_every_proof_verifies(make_client):
    client = make_client()
    items = _items(random.Random(1), 11, bad={3, 7})
    r = client.post("/v1/verify", json=_request(items))
    assert r.status_code == 200, r.text
    body = r.json()
    rid, root = body["batch_id"], bytes.fromhex(body["merkle_root"])

    rec = client.get(f"/v1/receipts/{rid}")
    assert rec.status_code == 200
    rec = rec.json()
    assert rec["id"] == rid and rec["count"] == 11 and rec["valid"] == 9
    assert rec["merkle_root"] == body["merkle_root"] and rec["schemes"] == ["ed25519"]
    assert rec["source"] == "http" and rec["backends"] == body["backends"]
    assert rec["created_at"].endswith("Z") and rec["duration_seconds"] > 0
    bitmap = bytes.fromhex(rec["verdict_bitmap"])
    assert [bool(bitmap[i // 8] >> (i % 8) & 1) for i in range(11)] == body["verdicts"]

    code = SCHEMES["ed25519"].code
    for i, (pk, msg, sig) in enumerate(items):
        p = client.get(f"/v1/receipts/{rid}/proof/{i}")
        assert p.status_code == 200
        p = p.json()
        assert p["verdict"] == (i not in {3, 7}) and p["index"] == i and p["count"] == 11
        leaf = leaf_hash(code, p["verdict"], pk, msg, sig)
        assert p["leaf_hash"] == leaf.hex()
        path = [bytes.fromhex(h) for h in p["audit_path"]]
        assert verify_inclusion(root, leaf, i, 11, path)
        assert not verify_inclusion(root, leaf_hash(code, not p["verdict"], pk, msg, sig), i, 11, path)
        assert verify_inclusion(**p)  # the JSON as served (hex, audit_path), issue 53
        assert verify_inclusion(**{**p, "leaf_hash": leaf})  # with the user's own leaf, as bytes
        tampered = list(p["audit_path"])
        tampered[i % len(tampered)] = bytes(31).hex() + "01"
        assert not verify_inclusion(**{**p, "audit_path": tampered})
        assert not verify_inclusion(**{**p, "audit_path": p["audit_path"][:-1]})


def test_verify_inclusion_raises_on_what_is_not_a_proof(make_client):
    from zapverify import MalformedProof

    client = make_client()
    rid = client.post("/v1/verify", json=_request(_items(random.Random(3), 5))).json()["batch_id"]
    p = client.get(f"/v1/receipts/{rid}/proof/2").json()
    assert verify_inclusion(**p) and verify_inclusion(**{**p, "merkle_root": "0x" + p["merkle_root"].upper()})
    for field, bad, words in [("merkle_root", "zz" * 32, "not hex"), ("leaf_hash", p["leaf_hash"][:-2], "31 bytes"),
                              ("audit_path", [p["audit_path"][0], "0x12"], "1 bytes"),
                              ("audit_path", [p["audit_path"][0] + " "], "not hex"),
                              ("audit_path", "".join(p["audit_path"]), "a list"), ("index", "2", "integer"),
                              ("count", 5.0, "integer"), ("leaf_hash", None, "hex text or bytes")]:
        with pytest.raises(MalformedProof) as e:
            verify_inclusion(**{**p, field: bad})
        assert words in e.value.message and e.value.field.startswith(field), (field, e.value.message)
        assert isinstance(e.value, ValueError) and e.value.code == "BAD_PROOF"
    with pytest.raises(TypeError):  # a field the served proof does not have
        verify_inclusion(**{**p, "path": p["audit_path"]})


def test_list_pages_with_keyset_cursor(make_client):
    client = make_client()
    rng = random.Random(2)
    ids = [client.post("/v1/verify", json=_request(_items(rng, 2))).json()["batch_id"] for _ in range(5)]
    first = client.get("/v1/receipts", params={"limit": 3}).json()
    assert [r["id"] for r in first["receipts"]] == ids[:3] and first["next_after"] == ids[2]
    second = client.get("/v1/receipts", params={"limit": 3, "after": first["next_after"]}).json()
    assert [r["id"] for r in second["receipts"]] == ids[3:] and second["next_after"] is None


def test_newest_first_with_order_desc_and_its_cursor(make_client):
    client = make_client()
    rng = random.Random(12)
    ids = [client.post("/v1/verify", json=_request(_items(rng, 2))).json()["batch_id"] for _ in range(5)]
    newest = client.get("/v1/receipts", params={"order": "desc", "limit": 1}).json()
    assert [r["id"] for r in newest["receipts"]] == [ids[-1]] and newest["next_after"] == ids[-1]
    assert client.get("/v1/receipts", params={"limit": 1}).json()["receipts"][0]["id"] == ids[0]  # default: asc
    first = client.get("/v1/receipts", params={"order": "desc", "limit": 3}).json()
    assert [r["id"] for r in first["receipts"]] == ids[:1:-1] and first["next_after"] == ids[2]
    second = client.get("/v1/receipts", params={"order": "desc", "limit": 3, "after": first["next_after"]}).json()
    assert [r["id"] for r in second["receipts"]] == ids[1::-1] and second["next_after"] is None
    r = client.get("/v1/receipts", params={"order": "newest"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "order"


def test_a_bad_uuid_is_refused_in_words_not_with_a_regex(make_client):
    client = make_client()
    for path, field in [("/v1/receipts/not-a-uuid", "receipt_id"), ("/v1/receipts?after=zzz", "after"),
                        ("/v1/receipts/not-a-uuid/proof/0", "receipt_id")]:
        err = client.get(path).json()["error"]
        assert err["field"] == field and err["code"] == "BAD_REQUEST"
        assert err["message"].startswith(f"{field} is not a UUID") and "[0-9" not in err["message"], err


def test_unknown_id_and_index_are_named_404s(make_client):
    client = make_client()
    rid = client.post("/v1/verify", json=_request(_items(random.Random(3), 4))).json()["batch_id"]
    r = client.get(f"/v1/receipts/{new_batch_id()}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "RECEIPT_NOT_FOUND"
    r = client.get(f"/v1/receipts/{new_batch_id()}/proof/0")
    assert r.status_code == 404 and r.json()["error"]["code"] == "RECEIPT_NOT_FOUND"
    for index in (4, -1, 10**12):
        r = client.get(f"/v1/receipts/{rid}/proof/{index}")
        assert r.status_code == 404
        assert r.json()["error"] == {"code": "LEAF_INDEX_OUT_OF_RANGE", "field": "index",
                                     "message": r.json()["error"]["message"]}


@pytest.mark.parametrize("path,field", [("/v1/receipts/not-a-uuid", "receipt_id"),
                                        ("/v1/receipts/not-a-uuid/proof/0", "receipt_id"),
                                        ("/v1/receipts?after=zzz", "after"),
                                        ("/v1/receipts?limit=0", "limit"),
                                        ("/v1/receipts?limit=1001", "limit"),
                                        ("/v1/receipts/01890a5d-ac96-774b-bcce-b302099a8057/proof/x", "index")])
def test_bad_input_is_422_naming_the_field(make_client, path, field):
    r = make_client().get(path)
    assert r.status_code == 422
    assert r.json()["error"]["field"] == field


def test_failed_receipt_write_is_503_without_verdicts(make_client):
    client = make_client()
    client.app.state.runtime.store.close()  # the database is gone: every write fails
    r = client.post("/v1/verify", json=_request(_items(random.Random(4), 3)))
    assert r.status_code == 503
    body = r.json()
    assert body["error"]["code"] == "STORE_UNAVAILABLE" and "verdicts" not in body


def test_receipts_off_writes_nothing_and_reads_say_so(make_client, tmp_path):
    client = make_client(receipts=False)
    r = client.post("/v1/verify", json=_request(_items(random.Random(5), 2)))
    assert r.status_code == 200
    got = client.get(f"/v1/receipts/{r.json()['batch_id']}")
    assert got.status_code == 404 and got.json()["error"]["code"] == "RECEIPTS_DISABLED"
    assert not (tmp_path / "receipts.sqlite3").exists()


def test_receipt_is_durable_in_the_configured_database(make_client, tmp_path):
    url = f"sqlite:///{tmp_path / 'elsewhere' / 'r.db'}"
    client = make_client(database_url=url)
    rid = client.post("/v1/verify", json=_request(_items(random.Random(6), 5))).json()["batch_id"]
    with open_store(url) as s:  # a second connection sees the committed row
        assert s.get(rid).count == 5
