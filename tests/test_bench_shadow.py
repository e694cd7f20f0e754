"""bench/shadow.py: a tiny run writes both result files with the off/on rates and their ratio."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from app.engine.device import hostbuild

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")
def test_shadow_bench_reports_off_on_and_their_ratio(tmp_path):
    spec = importlib.util.spec_from_file_location("shadow_bench", BENCH / "shadow.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["shadow_bench"] = mod
    spec.loader.exec_module(mod)
    args = ["--items", "24", "--batches", "1", "--rounds", "2", "--warmup", "24", "--out", str(tmp_path)]
    assert mod.main(args) == 0
    result = json.loads((tmp_path / "shadow.json").read_text())
    assert len(result["items_per_second"]["off"]) == len(result["items_per_second"]["on"]) == 2
    med = result["median_items_per_second"]
    on, off = result["items_per_second"]["on"], result["items_per_second"]["off"]
    assert result["ratio_on_off"] == pytest.approx((on[0] / off[0] + on[1] / off[1]) / 2)  # median of two rounds
    assert result["ratio_of_medians"] == pytest.approx(med["on"] / med["off"])
    assert result["checked_items"] >= 3 and result["mismatches"] == 0  # at least one per on-batch, all agreeing
    assert result["provenance"]["commit"] and "on / off" in (tmp_path / "shadow.md").read_text()
