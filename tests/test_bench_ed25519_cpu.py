"""bench/ed25519_cpu.py runs end to end (tiny counts), checks every verdict and writes its results where asked."""

from __future__ import annotations

import importlib
import json

import pytest


def _module():
    # imported under its package name, so that the dalek pool's worker function pickles
    return importlib.import_module("bench.ed25519_cpu")


def test_half_invalid_items_are_every_other_one():
    items, want = _module().items_for(6, seed=1, half_invalid=True)
    from app.engine.reference import reference

    assert want == [True, False] * 3
    assert [reference.verify_ed25519(i.public_key, i.message, i.signature) for i in items] == want


@pytest.mark.slow
def test_writes_json_and_markdown(tmp_path):
    mod = _module()
    assert mod.main(["--items", "16", "--batch", "32", "--rounds", "1", "--reps", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "ed25519_cpu.json").read_text())
    us = result["per_core"]["us_per_verify"]
    assert {"own", "own_portable", "own_each", "libsodium"} <= set(us) and all(v["median"] > 0 for v in us.values())
    served = result["served"]["items_per_second"]
    assert {"zap/valid", "zap/half_invalid"} <= set(served) and all(v["median"] > 0 for v in served.values())
    md = (tmp_path / "ed25519_cpu.md").read_text()
    assert "## Per core" in md and "## Served through ZAP" in md
