"""ethereum/bls12-381-tests v0.1.2 `verify` cases, read in place, through the engine."""

from app.vectors import _ethereum_bls
from tests.vectors_util import run_records


def test_every_ethereum_verify_case_agrees(engine, vectors_root):
    records = list(_ethereum_bls(vectors_root))
    assert len(records) == 29 and sum(r["expected"] for r in records) == 10  # SOURCES.md
    bad, _ = run_records(engine, records)
    assert bad == []
    infinity = [r for r in records if r["id"] == "verify_infinity_pubkey_and_infinity_signature"]
    assert infinity and infinity[0]["expected"] is False  # KeyValidate rejects the identity key
