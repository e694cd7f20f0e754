"""BIP-340's test-vectors.csv (bitcoin/bips, bip-0340/), read in place from ../shared/vectors,
through the engine on the CPU backend."""

from app.vectors import _bip340
from tests.vectors_util import run_records


def test_every_bip340_vector_agrees(engine, vectors_root):
    records = list(_bip340(vectors_root))
    # SOURCES.md: 19 rows, every one a verification case (those with a secret key are also
    # signing cases); 9 valid, 10 invalid, among them 2 whose key has no lift_x (rows 5, 14).
    assert len(records) == 19 and sum(r["expected"] for r in records) == 9
    assert all(r["scheme"] == "bip340" and "rule" not in r for r in records)
    bad, verdicts = run_records(engine, records)
    assert bad == []
    assert verdicts == [r["expected"] for r in records]
    by_id = {r["id"]: r for r in records}
    assert {len(bytes.fromhex(by_id[i]["message"])) for i in ("15", "16", "17", "18")} == {0, 1, 17, 100}
    assert not by_id["5"]["expected"] and not by_id["14"]["expected"]  # pk not on the curve; pk x ≥ p
