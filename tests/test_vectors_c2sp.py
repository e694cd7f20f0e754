"""Project Wycheproof vectors (C2SP/wycheproof), read in place from ../shared/vectors, through the engine."""

import pytest

from app.vectors import _wycheproof
from tests.vectors_util import run_records


@pytest.fixture(scope="module")
def records(vectors_root):
    return list(_wycheproof(vectors_root))


# Counts from ../shared/vectors/SOURCES.md.
@pytest.mark.parametrize("source,count", [
    ("wycheproof/ed25519_test.json", 151),
    ("wycheproof/ecdsa_secp256k1_sha256_test.json", 476),
    ("wycheproof/ecdsa_secp256k1_sha256_p1363_test.json", 252),
    ("wycheproof/ecdsa_secp256k1_sha256_bitcoin_test.json", 463),
    ("wycheproof/mldsa_44_verify_test.json", 180),
    ("wycheproof/mldsa_65_verify_test.json", 210),
    ("wycheproof/mldsa_87_verify_test.json", 241),
    ("wycheproof/bls_sig_g2_pop_verify_test.json", 26),
    ("wycheproof/ecdsa_secp256r1_sha256_test.json", 484),
    ("wycheproof/ecdsa_secp256r1_sha256_p1363_test.json", 262),
])
def test_every_wycheproof_vector_agrees(engine, records, source, count):
    mine = [r for r in records if r["source"] == source]
    assert len(mine) == count
    bad, _ = run_records(engine, mine)
    assert bad == []
    # No rule overrides: for Wycheproof our semantics give exactly the file's verdicts.
    assert all("rule" not in r for r in mine)


def test_high_s_rule_in_plain_ecdsa_files(engine, records):
    """Plain ECDSA files accept high-S; they run with allow_high_s.  The same items without
    the flag follow our default low-S rule, exactly as the bitcoin file expects."""
    plain = [r for r in records if r["source"] == "wycheproof/ecdsa_secp256k1_sha256_test.json" and r["expected"]]
    _, with_flag = run_records(engine, plain)
    _, without = run_records(engine, [{k: v for k, v in r.items() if k != "allow_high_s"} for r in plain])
    assert all(with_flag)
    assert 0 < without.count(False) < len(plain)  # the high-S ones, and only those, flip


def test_low_s_turns_exactly_the_high_s_p256_vectors_false(engine, records):
    """P-256 accepts high-S by default, as the plain files expect; under ``low_s`` the valid
    items whose s > n/2 (and only those) become false."""
    from app.engine.reference.reference import P256_N

    plain = [r for r in records if r["source"] == "wycheproof/ecdsa_secp256r1_sha256_p1363_test.json"
             and r["expected"]]
    _, low = run_records(engine, [{**r, "low_s": True} for r in plain])
    high = [int(r["signature"][64:], 16) > P256_N // 2 for r in plain]
    assert 0 < sum(high) < len(plain)
    assert low == [not h for h in high]
