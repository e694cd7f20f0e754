"""bench/ingest.py runs end to end (tiny frames) and writes its results where asked."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "ingest.py"


@pytest.mark.slow
def test_writes_json_and_markdown(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_ingest", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--batch", "64", "--small", "8", "--rounds", "1", "--reps", "1", "--workers", "1",
                     "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "ingest.json").read_text())
    ips = result["items_per_second"]
    assert set(ips) == {"engine", "tcp", "engine_small", "tcp_small"} and all(v["median"] > 0 for v in ips.values())
    assert result["ratios"]["tcp/engine"] == pytest.approx(ips["tcp"]["median"] / ips["engine"]["median"])
    assert result["server_counters"]["dropped_total"] == 0 and result["server_counters"]["frames_verified"] >= 10
    md = (tmp_path / "ingest.md").read_text()
    assert "| tcp/engine |" in md and "TCP ingest" in md
