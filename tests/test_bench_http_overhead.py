"""bench/http_overhead.py runs end to end (tiny batches) and writes its results where asked."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "http_overhead.py"


@pytest.mark.slow
def test_writes_json_and_markdown(tmp_path):
    spec = importlib.util.spec_from_file_location("http_overhead", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--batch", "32", "--rounds", "1", "--reps", "1", "--workers", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "http_overhead.json").read_text())
    ips = result["items_per_second"]
    assert set(ips) == {"engine", "zap", "json"} and all(v["median"] > 0 for v in ips.values())
    assert result["ratios"]["zap/engine"] == pytest.approx(ips["zap"]["median"] / ips["engine"]["median"])
    md = (tmp_path / "http_overhead.md").read_text()
    assert "| zap/engine |" in md and "| json/engine |" in md
