"""The pure-Python FIPS 205 oracle (tests/oracles/slh_dsa.py) against pqcrypto and ACVP.

The oracle is what lets the ACVP SLH-DSA sigVer vectors (internal interface, Alg. 20) be
checked positively; these tests show it agrees with the project's reference library on the
external interface (Alg. 24) and with the ACVP source's verdicts on every vector.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from app.core.schemes import SCHEMES
from app.engine.reference.kat import known_answers, mutate, sign_items
from app.engine.reference.reference import verifier
from tests.oracles.slh_dsa import PARAMS, base_2b, slh_verify, slh_verify_internal

SLH = sorted(s for s in SCHEMES if s.startswith("slh-dsa"))


def _reference(item) -> bool:
    return verifier(SCHEMES[item.scheme])(item.public_key, item.message, item.signature, item.context)


def test_parameter_sets_match_the_project_schemes():
    assert sorted(PARAMS) == SLH
    for sid, p in PARAMS.items():
        assert SCHEMES[sid].sig_len == p.sig_len  # FIPS 205 Table 2 "sig bytes"
        assert SCHEMES[sid].pk_len == 2 * p.n
        assert p.h == p.d * p.hp and p.len == 2 * p.n + 3


def test_base_2b():
    # Alg. 4 on 0xAB 0xCD: 4-bit digits a,b,c,d; 12-bit digit 0xABC; 6-bit 101010 111100
    assert base_2b(b"\xab\xcd", 4, 4) == [0xA, 0xB, 0xC, 0xD]
    assert base_2b(b"\xab\xcd", 12, 1) == [0xABC]
    assert base_2b(b"\xab\xcd", 6, 2) == [0b101010, 0b111100]


@pytest.mark.parametrize("scheme", SLH)
def test_agrees_with_pqcrypto_on_known_answers(scheme):
    answers = known_answers()[scheme]  # 2 valid (one with a context) + 2 one-bit mutations
    assert {ka.expected for ka in answers} == {True, False}
    for ka in answers:
        it = ka.item
        got = slh_verify(scheme, it.message, it.signature, it.context, it.public_key)
        assert got == ka.expected == _reference(it), ka.id


@pytest.mark.parametrize("scheme", ["slh-dsa-sha2-128f", "slh-dsa-shake-192f"])
def test_agrees_with_pqcrypto_with_a_context(scheme):
    rng = random.Random(scheme)
    (item,) = sign_items(scheme, 1, seed=7, context=b"oracle-ctx")
    cases = [(item, True),
             (replace(item, context=b""), False),            # context is bound into M'
             (replace(item, context=b"oracle-cty"), False)]
    cases += [(mutate(item, rng), False) for _ in range(3)]
    for it, want in cases:
        assert slh_verify(scheme, it.message, it.signature, it.context, it.public_key) is want
        assert _reference(it) is want
    # Alg. 24 is Alg. 20 on 0 ‖ |ctx| ‖ ctx ‖ M
    m_prime = bytes([0, len(item.context)]) + item.context + item.message
    assert slh_verify_internal(scheme, m_prime, item.signature, item.public_key)
    assert not slh_verify_internal(scheme, item.message, item.signature, item.public_key)


def test_rejects_bad_lengths_and_long_contexts():
    ka = known_answers()["slh-dsa-sha2-128f"][0]
    it = ka.item
    assert not slh_verify("slh-dsa-sha2-128f", it.message, it.signature[:-1], it.context, it.public_key)
    assert not slh_verify("slh-dsa-sha2-128f", it.message, it.signature, it.context, it.public_key + b"\0")
    assert not slh_verify("slh-dsa-sha2-128f", it.message, it.signature, bytes(256), it.public_key)


def test_acvp_vectors_match_the_source_verdicts(vectors_root):
    # Read the source JSON directly, so the verdicts checked are the source's own testPassed.
    folder = vectors_root / "acvp" / "SLH-DSA-sigVer-FIPS205_v1.1.0.37_via_circl"
    passed = {t["tcId"]: t["testPassed"]
              for g in json.loads((folder / "verify_results.json").read_text())["testGroups"]
              for t in g["tests"]}
    groups = json.loads((folder / "verify_prompt.json").read_text())["testGroups"]
    assert {g["parameterSet"].lower() for g in groups} == set(SLH)
    got = {}
    for g in groups:
        for t in g["tests"]:
            got[t["tcId"]] = slh_verify_internal(g["parameterSet"].lower(), bytes.fromhex(t["message"]),
                                                 bytes.fromhex(t["signature"]), bytes.fromhex(t["pk"]))
    assert len(got) == 108 and sum(got.values()) == 36
    assert got == passed
