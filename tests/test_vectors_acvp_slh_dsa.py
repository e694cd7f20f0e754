"""NIST ACVP SLH-DSA sigVer (v1.1.0.37, internal interface), read in place, through the engine.

Our semantics are FIPS 205 slh_verify (external, pure): these vectors sign the internal
message M directly, not 0 ‖ |ctx| ‖ ctx ‖ M, so the rule RULE_SLH_INTERNAL gives every
source-valid signature a False verdict here.  Source-invalid signatures stay False.
The rule is shown, not assumed: the FIPS 205 oracle (tests/oracles/slh_dsa.py) finds every
rule-marked signature valid under slh_verify_internal (Alg. 20) and the others invalid.
"""

from app.core.schemes import SCHEMES
from app.vectors import RULE_SLH_INTERNAL, _acvp_slh_dsa
from tests.oracles.slh_dsa import slh_verify_internal
from tests.vectors_util import run_records


def test_acvp_slh_dsa_by_rule(engine, vectors_root):
    records = list(_acvp_slh_dsa(vectors_root))
    assert len(records) == 108  # 12 parameter sets x 9 (SOURCES.md)
    assert {r["scheme"] for r in records} == {s for s in SCHEMES if s.startswith("slh-dsa")}
    by_rule = [r for r in records if r.get("rule") == RULE_SLH_INTERNAL]
    assert len(by_rule) == 36  # the 36 signatures the source accepts
    internal = {r["id"]: slh_verify_internal(r["scheme"], bytes.fromhex(r["message"]),
                                             bytes.fromhex(r["signature"]), bytes.fromhex(r["public_key"]))
                for r in records}
    assert {i for i, ok in internal.items() if ok} == {r["id"] for r in by_rule}
    bad, got = run_records(engine, records)
    assert bad == [] and not any(got)
