"""FastAggregateVerify and AggregateVerify (app/engine/reference/bls_aggregate.py) against py_ecc.

Keys, signatures and aggregates are made with py_ecc's Ethereum ``G2ProofOfPossession``, and
every expected verdict is checked against py_ecc's own FastAggregateVerify/AggregateVerify
before ours is compared with it.
"""

from __future__ import annotations

import hashlib
import random

import py_arkworks_bls12381 as ark
import pytest

from app.core.batch import AggregateItem
from app.engine.commit import merkle
from app.engine.reference import bls_aggregate, kat
from app.engine.reference.bls_aggregate import aggregate_verify, fast_aggregate_verify

py_ecc_bls = pytest.importorskip("py_ecc.bls")
POP = py_ecc_bls.G2ProofOfPossession

IDENTITY_PK = b"\xc0" + bytes(47)
INFINITY_SIG = b"\xc0" + bytes(95)


def _neg_pk(pk: bytes) -> bytes:
    return bytes((-ark.G1Point.from_compressed_bytes(pk)).to_compressed_bytes())


@pytest.fixture(scope="module")
def signers():
    rng = random.Random(21)
    sks = [rng.randrange(1, 2**252) for _ in range(5)]  # below the group order r
    msgs = [f"block root {i}".encode() for i in range(5)]
    pks = [POP.SkToPk(sk) for sk in sks]
    return sks, pks, msgs


@pytest.fixture(scope="module")
def fast_cases(signers):
    sks, pks, msgs = signers
    m = msgs[0]
    sig3 = POP.Aggregate([POP.Sign(sk, m) for sk in sks[:3]])
    off_subgroup = kat.off_subgroup_point(ark.G1Point, 48, random.Random(3))
    return [
        ("three signers", pks[:3], m, sig3, True),
        ("one signer is Verify", pks[:1], m, POP.Sign(sks[0], m), True),
        ("wrong message", pks[:3], msgs[1], sig3, False),
        ("a key missing", pks[:2], m, sig3, False),
        ("identity key added", pks[:3] + [IDENTITY_PK], m, sig3, False),
        ("no keys", [], m, sig3, False),
        ("no keys, infinity signature", [], m, INFINITY_SIG, False),
        ("key outside the subgroup", pks[:2] + [off_subgroup], m, sig3, False),
        ("infinity signature", pks[:3], m, INFINITY_SIG, False),
        ("keys summing to the identity, infinity signature", [pks[0], _neg_pk(pks[0])], m, INFINITY_SIG, False),
        ("infinity flag with a non-zero bit", pks[:3], m, b"\xe0" + bytes(95), False),
        # Keys that cancel: P and −P beside Q aggregate to Q, so Q's lone signature verifies
        # for all three (docs/bls-aggregate.md: safe only with proofs of possession checked).
        ("cancelling keys beside a signer (POP required)", [pks[1], _neg_pk(pks[1]), pks[2]], m,
         POP.Sign(sks[2], m), True),
        ("short signature", pks[:3], m, sig3[:95], False),
    ]


@pytest.fixture(scope="module")
def aggregate_cases(signers):
    sks, pks, msgs = signers
    sig5 = POP.Aggregate([POP.Sign(sk, mm) for sk, mm in zip(sks, msgs)])
    same = POP.Aggregate([POP.Sign(sks[0], msgs[0]), POP.Sign(sks[1], msgs[0])])
    off_subgroup = kat.off_subgroup_point(ark.G1Point, 48, random.Random(4))
    one_wrong = list(msgs)
    one_wrong[3] = b"block root 3'"
    return [
        ("five signers, five messages", pks, msgs, sig5, True),
        ("repeated message allowed (POP)", pks[:2], [msgs[0], msgs[0]], same, True),
        ("one wrong message among many", pks, one_wrong, sig5, False),
        ("messages swapped", pks[:2], [msgs[1], msgs[0]],
         POP.Aggregate([POP.Sign(sks[0], msgs[0]), POP.Sign(sks[1], msgs[1])]), False),
        ("mismatched lengths", pks, msgs[:4], sig5, False),
        ("no keys", [], [], sig5, False),
        ("no keys, infinity signature", [], [], INFINITY_SIG, False),
        ("identity key", pks[:4] + [IDENTITY_PK], msgs, sig5, False),
        ("key outside the subgroup", pks[:4] + [off_subgroup], msgs, sig5, False),
        ("infinity signature", pks, msgs, INFINITY_SIG, False),
        # e(PK, H(m)) · e(−PK, H(m)) = 1: both keys pass KeyValidate, so this holds (py_ecc agrees).
        ("key and its negation, one message, infinity signature", [pks[0], _neg_pk(pks[0])],
         [msgs[0], msgs[0]], INFINITY_SIG, True),
    ]


def test_fast_aggregate_verify_matches_py_ecc(fast_cases):
    for name, pks, msg, sig, want in fast_cases:
        assert bool(POP.FastAggregateVerify(pks, msg, sig)) is want, f"py_ecc: {name}"
        assert fast_aggregate_verify(pks, msg, sig) is want, name
        item = AggregateItem("fast_aggregate", tuple(pks), (msg,), sig)
        assert bls_aggregate.verify_item(item) is want, name


def test_aggregate_verify_matches_py_ecc(aggregate_cases):
    for name, pks, msgs, sig, want in aggregate_cases:
        assert bool(POP.AggregateVerify(pks, msgs, sig)) is want, f"py_ecc: {name}"
        assert aggregate_verify(pks, msgs, sig) is want, name
        item = AggregateItem("aggregate", tuple(pks), tuple(msgs), sig)
        assert bls_aggregate.verify_item(item) is want, name


def test_verify_item_refuses_unknown_mode_and_two_messages_in_fast_mode(signers):
    sks, pks, msgs = signers
    sig = POP.Sign(sks[0], msgs[0])
    assert bls_aggregate.verify_item(AggregateItem("fast_aggregate", (pks[0],), (msgs[0],), sig))
    assert not bls_aggregate.verify_item(AggregateItem("fast_aggregate", (pks[0],), (msgs[0], msgs[0]), sig))
    assert not bls_aggregate.verify_item(AggregateItem("bogus", (pks[0],), (msgs[0],), sig))


def test_aggregate_leaf_follows_the_documented_layout():
    pks, msgs, sig = [b"\x01" * 48, b"\x02" * 48], [b"ab", b"c"], b"\x03" * 96

    def listed(parts):
        data = len(parts).to_bytes(4, "big") + b"".join(len(p).to_bytes(4, "big") + p for p in parts)
        return hashlib.sha256(data).digest()

    data = bytes((0xA9, 2, 1)) + listed(pks) + listed(msgs) + hashlib.sha256(sig).digest()
    assert len(data) == 99
    assert merkle.aggregate_leaf_hash(2, True, pks, msgs, sig) == hashlib.sha256(b"\x00" + data).digest()


def test_aggregate_leaf_separates_mode_verdict_and_list_boundaries():
    pks, sig = [b"\x01" * 48], b"\x03" * 96
    leaves = {
        merkle.aggregate_leaf_hash(2, True, pks, [b"ab", b"c"], sig),
        merkle.aggregate_leaf_hash(2, True, pks, [b"a", b"bc"], sig),
        merkle.aggregate_leaf_hash(2, True, pks, [b"abc"], sig),
        merkle.aggregate_leaf_hash(1, True, pks, [b"abc"], sig),
        merkle.aggregate_leaf_hash(1, False, pks, [b"abc"], sig),
        merkle.aggregate_leaf_hash(1, False, pks + pks, [b"abc"], sig),
    }
    assert len(leaves) == 6
    from app.core.schemes import SCHEMES

    assert merkle.AGGREGATE_LEAF_TAG not in {s.code for s in SCHEMES.values()}
