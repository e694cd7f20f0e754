"""The fast test signer (tests/slh_dsa_signer.py) makes signatures that pqcrypto, the
pure-Python FIPS 205 oracle and the kernel all accept, for every parameter set — which is what
scripts/agreement --scheme slh-dsa relies on when it signs its 10 000 valid items per set with it."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from app.engine.device import hostbuild
from tests import slh_dsa_signer
from tests.oracles.slh_dsa import PARAMS, slh_verify
from tests.slh_dsa_cases import SLH_IDS, kernel_verdicts, reference_verdicts, sign_pool

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler for the host build")

CASES = [(b"", b""), (bytes(range(255)), b"m" * 300)]


@pytest.fixture(scope="module")
def kernel():
    return hostbuild.load("slh_dsa")


@pytest.mark.parametrize("sid", SLH_IDS)
def test_every_verifier_accepts_its_signatures(sid, kernel):
    items = slh_dsa_signer.sign_items(sid, CASES, random.Random(f"signer/{sid}"))
    p = PARAMS[sid]
    assert [(len(it.public_key), len(it.signature)) for it in items] == [(2 * p.n, p.sig_len)] * 2
    assert items[0].public_key == items[1].public_key  # one key per call
    assert items[0].signature[:p.n] != items[1].signature[:p.n]  # hedged: a fresh R per signature
    assert reference_verdicts(items) == [True, True]
    assert [slh_verify(sid, it.message, it.signature, it.context, it.public_key) for it in items] == [True, True]
    assert kernel_verdicts(kernel, items) == [True, True]
    # The same signature on another message, or under another context, is refused by pqcrypto:
    # the checks above are not vacuous.
    wrong = [replace(items[0], message=b"x"), replace(items[1], context=b"")]
    assert reference_verdicts(wrong) == [False, False]


def test_a_pool_is_reproducible_from_its_seed_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ZAPVERIFY_KAT_CACHE", str(tmp_path))
    sid = "slh-dsa-sha2-128f"
    first = sign_pool(sid, 3, seed=5, signer="native")
    assert len(list(tmp_path.glob(f"slh-pool-{sid}-*.json"))) == 1
    again = sign_pool(sid, 3, seed=5, signer="native", cache=False)
    assert again == first
    assert sign_pool(sid, 3, seed=6, signer="native", cache=False)[0].public_key != first[0].public_key
    assert [len(it.context) for it in first] == [0, 1, 255]
    assert reference_verdicts(first) == [True, True, True]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="context"):
        slh_dsa_signer.sign_items("slh-dsa-sha2-128f", [(bytes(256), b"")], random.Random(0))
    with pytest.raises(ValueError, match="scheme_id"):
        slh_dsa_signer.sign_items("ml-dsa-44", [(b"", b"")], random.Random(0))
    with pytest.raises(ValueError, match="signer"):
        sign_pool("slh-dsa-sha2-128f", 1, signer="openssl")
