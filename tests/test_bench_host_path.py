"""bench/host_path.py runs end to end (small frames): every frame's verdicts come back
through the service path, and the report says its backend only returns precomputed ones."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "host_path.py"


@pytest.mark.slow
def test_writes_json_and_markdown(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_host_path", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--batch", "512", "--frames", "2", "--rounds", "2", "--postgres", "",
                     "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "host_path.json").read_text())
    assert set(result["results"]) == {"none", "sqlite"}
    for r in result["results"].values():
        assert r["items_per_second"] > 0 and set(r["stage_items_per_second"]) == {"land", "decode", "verify", "respond"}
    assert "precomputed" in result["backend"]
    assert "RETURNS PRECOMPUTED VERDICTS" in (tmp_path / "host_path.md").read_text()
