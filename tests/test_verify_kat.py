"""The fixed known answers shipped with the package (app/engine/reference/known_answers.json)."""

from __future__ import annotations

import pytest

from app.core.schemes import SCHEMES
from app.engine.reference import kat, reference


def test_every_scheme_has_valid_and_invalid_answers():
    answers = kat.known_answers()
    assert set(answers) == set(SCHEMES)
    for scheme_id, kas in answers.items():
        assert [ka.expected for ka in kas].count(True) >= 2, scheme_id
        assert [ka.expected for ka in kas].count(False) >= 2, scheme_id
        assert all(ka.item.scheme == scheme_id for ka in kas)


@pytest.mark.parametrize("scheme_id", sorted(SCHEMES))
def test_shipped_answers_agree_with_the_reference_library(scheme_id):
    scheme = SCHEMES[scheme_id]
    verify = reference.verifier(scheme)
    for ka in kat.known_answers()[scheme_id]:
        it = ka.item
        assert verify(it.public_key, it.message, it.signature, it.context,
                      **scheme.verifier_options(it)) is ka.expected, ka.id


def test_encoding_round_trips():
    ka = kat.known_answers()["ml-dsa-44"][1]
    assert kat.decode(kat.encode(ka)) == ka


def test_reading_them_signs_nothing(monkeypatch):
    kat.known_answers.cache_clear()

    def refuse(*a, **k):
        raise AssertionError("known_answers() signed an item")

    monkeypatch.setattr(kat, "sign_items", refuse)
    monkeypatch.setattr(kat, "generate", refuse)
    try:
        assert len(kat.known_answers()["slh-dsa-shake-256s"]) == 4
    finally:
        kat.known_answers.cache_clear()
