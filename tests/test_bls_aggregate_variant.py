"""The ``eth`` variant of ``fast_aggregate`` items (issue 40; docs/bls-aggregate.md, section 1).

Ethereum's consensus specs (altair, ``eth_fast_aggregate_verify``) answer ``true`` for no
keys together with the G2 infinity signature, where the IETF draft's FastAggregateVerify
answers ``false``; everything else is the same rule.  Checked here: the reference, the Merkle
leaf (which must commit to the variant, since the verdict depends on it), the JSON and
WebSocket API, the client's body, and py_ecc's FastAggregateVerify as the oracle of the
non-empty cases.
"""

from __future__ import annotations

import json
import random

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.core.batch import AGGREGATE_ETH_LEAF_MODE, G2_INFINITY, AggregateItem
from app.engine.commit import merkle
from app.engine.reference import bls_aggregate
from app.engine.runtime import Runtime
from app.main import create_app
from zapverify import aggregate_body, aggregate_leaf

py_ecc_bls = pytest.importorskip("py_ecc.bls")
POP = py_ecc_bls.G2ProofOfPossession

IDENTITY_PK = b"\xc0" + bytes(47)


def _eth_rule(pks, msg, sig) -> bool:
    """The consensus specs' eth_fast_aggregate_verify, written from the spec with py_ecc."""
    if len(pks) == 0 and sig == G2_INFINITY:
        return True
    return bool(POP.FastAggregateVerify(list(pks), msg, sig))


@pytest.fixture(scope="module")
def cases():
    rng = random.Random(40)
    sks = [rng.randrange(1, 2**250) for _ in range(3)]
    pks = [POP.SkToPk(sk) for sk in sks]
    m = b"sync committee root"
    sig = POP.Aggregate([POP.Sign(sk, m) for sk in sks])
    return [
        ("no keys, infinity signature", (), m, G2_INFINITY),
        ("no keys, a real signature", (), m, sig),
        ("no keys, infinity with a sign bit", (), m, b"\xe0" + bytes(95)),
        ("no keys, short infinity", (), m, G2_INFINITY[:95]),
        ("three signers", tuple(pks), m, sig),
        ("three signers, wrong message", tuple(pks), m + b"!", sig),
        ("keys and the infinity signature", tuple(pks), m, G2_INFINITY),
        ("identity key, infinity signature", (IDENTITY_PK,), m, G2_INFINITY),
    ]


def test_reference_both_variants_against_the_spec_rule(cases):
    for name, pks, m, sig in cases:
        ietf = bls_aggregate.verify_item(AggregateItem("fast_aggregate", pks, (m,), sig))
        eth = bls_aggregate.verify_item(AggregateItem("fast_aggregate", pks, (m,), sig, "eth"))
        assert ietf == bool(POP.FastAggregateVerify(list(pks), m, sig)), name
        assert eth == _eth_rule(pks, m, sig), name
        # The variants differ in exactly the one case the specs name.
        assert (ietf != eth) == (name == "no keys, infinity signature"), name


def test_eth_on_aggregate_or_unknown_variant_is_false():
    assert not bls_aggregate.verify_item(AggregateItem("aggregate", (), (), G2_INFINITY, "eth"))
    assert not bls_aggregate.verify_item(AggregateItem("fast_aggregate", (), (b"m",), G2_INFINITY, "bogus"))


def test_leaf_commits_to_the_variant():
    ietf = AggregateItem("fast_aggregate", (), (b"m",), G2_INFINITY)
    eth = AggregateItem("fast_aggregate", (), (b"m",), G2_INFINITY, "eth")
    assert ietf.leaf_mode == 1 and eth.leaf_mode == AGGREGATE_ETH_LEAF_MODE == 3
    assert AggregateItem("aggregate", (), (), G2_INFINITY).leaf_mode == 2
    # IETF leaves are those of before the variant existed: mode byte 1.
    assert merkle.aggregate_leaf(ietf, False) == merkle.aggregate_leaf_hash(1, False, (), (b"m",), G2_INFINITY)
    assert merkle.aggregate_leaf(eth, True) == merkle.aggregate_leaf_hash(3, True, (), (b"m",), G2_INFINITY)
    assert merkle.aggregate_leaf(eth, True) != merkle.aggregate_leaf(ietf, True)


def test_client_body_sends_the_variant_only_when_eth():
    body = aggregate_body([AggregateItem("fast_aggregate", (), (b"m",), G2_INFINITY, "eth"),
                           AggregateItem("fast_aggregate", (), (b"m",), G2_INFINITY)])
    assert body["items"][0]["variant"] == "eth" and "variant" not in body["items"][1]
    from app.core.errors import RequestError
    with pytest.raises(RequestError) as e:
        aggregate_body([AggregateItem("aggregate", (), (), G2_INFINITY, "eth")])
    assert e.value.field == "items[0].variant"


@pytest.fixture(scope="module")
def client(engine, tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("variant"), instance="variant")
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        yield c


def _row(variant=None, mode="fast_aggregate"):
    row = {"mode": mode, "public_keys": [], "signature": G2_INFINITY.hex()}
    if mode == "fast_aggregate":
        row["message"] = "00"
    else:
        row["messages"] = []
    if variant is not None:
        row["variant"] = variant
    return row


def test_endpoint_eth_true_default_false_and_leaves(client):
    r = client.post("/v1/verify/bls-aggregate", json={"items": [_row("eth"), _row(), _row("ietf")]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["verdicts"] == [True, False, False]
    leaves = [aggregate_leaf(AggregateItem("fast_aggregate", (), (b"\0",), G2_INFINITY, v), ok)
              for v, ok in (("eth", True), ("ietf", False), ("ietf", False))]
    assert bytes.fromhex(body["merkle_root"]) == merkle.root(leaves)


@pytest.mark.parametrize("row, field", [(_row("eth", mode="aggregate"), "items[0].variant"),
                                        (_row("ethereum"), "items[0].variant")])
def test_endpoint_refuses_a_misplaced_or_unknown_variant(client, row, field):
    r = client.post("/v1/verify/bls-aggregate", json={"items": [row]})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["field"] == field or field in err["message"]


def test_websocket_carries_the_variant(client):
    with client.websocket_connect("/v1/ws/verify") as ws:
        ws.send_text(json.dumps({"request_id": "v", "items": [_row("eth"), _row()]}))
        body = json.loads(ws.receive_text())
    assert body["request_id"] == "v" and body["verdicts"] == [True, False]
