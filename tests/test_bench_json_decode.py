"""bench/json_decode.py and bench/cpu_engine.py's --update rows: tiny runs, results where asked."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # so that functions it hands to worker processes pickle by name
    spec.loader.exec_module(mod)
    return mod


def test_json_decode_writes_every_path_for_both_encodings(tmp_path):
    mod = _load("json_decode")
    assert mod.main(["--batch", "64", "--rounds", "1", "--min-seconds", "0.01", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "json_decode.json").read_text())
    for enc in ("base64", "hex"):
        ips = result["results"][enc]["items_per_second"]
        assert set(ips) == {"columns", "route", "validate_json", "items"} and all(v["median"] > 0 for v in ips.values())
    assert "| base64 |" in (tmp_path / "json_decode.md").read_text()


def test_cpu_engine_update_keeps_older_rows_stamped_as_one_run():
    mod = _load("cpu_engine")
    meta = {"time": "2026-11-30T00:04:01Z", "load_average": [1.5, 1.3, 1.3]}
    row = mod._as_rounds({"scheme": "bls12-381", "raw_per_second": 366.5, "ratio": 1.016, "pool": "thread"}, meta)
    assert row["ratio"] == {"median": 1.016, "min": 1.016, "max": 1.016, "runs": [1.016]}
    assert (row["runs"], row["time"], row["load_average"], row["pool"]) == (1, meta["time"], 1.5, "thread")
    new = {"scheme": "ed25519", "time": "2026-11-30T17:45:00Z", "runs": 5}
    assert mod._as_rounds(new, meta) is new


@pytest.mark.slow
def test_cpu_engine_reports_median_and_spread(tmp_path, monkeypatch):
    mod = _load("cpu_engine")
    monkeypatch.setattr("sys.argv", ["cpu_engine", "--schemes", "ed25519", "--batch", "64", "--runs", "2",
                                     "--min-seconds", "0.02", "--out", str(tmp_path)])
    assert mod.main() == 0
    row, = json.loads((tmp_path / "cpu_engine.json").read_text())["rows"]
    assert len(row["ratio"]["runs"]) == 2 and row["ratio"]["min"] <= row["ratio"]["median"] <= row["ratio"]["max"]
    # The raw loop in one process per core, at once: the machine's own all-core rate.
    assert len(row["all_cores_raw_per_second"]["runs"]) == 2 and row["all_cores_speedup"]["median"] > 0
    assert row["engine_over_all_cores_raw"]["median"] > 0
    assert "| ed25519 |" in (tmp_path / "cpu_engine.md").read_text()


@pytest.mark.slow
def test_cpu_engine_keeps_each_row_as_measured_when_a_later_one_fails(tmp_path, monkeypatch):
    mod = _load("cpu_engine")
    (tmp_path / "cpu_engine.json").write_text(json.dumps(
        {"meta": {"time": "2026-11-30T00:04:01Z", "load_average": [1.0]},
         "rows": [{"scheme": "bls12-381", "pool": "thread", **dict.fromkeys(
             ("raw_per_second", "two_thread_speedup", "engine_per_second", "thread_per_second",
              "process_per_second", "ratio", "best_ratio"), 1.5)}]}))
    real = mod.items_for

    def items_for(scheme_id, n):
        if scheme_id == "secp256k1":
            raise RuntimeError("cut short")
        return real(scheme_id, n)

    monkeypatch.setattr(mod, "items_for", items_for)
    monkeypatch.setattr("sys.argv", ["cpu_engine", "--schemes", "ed25519,secp256k1", "--batch", "32", "--runs", "1",
                                     "--min-seconds", "0.02", "--out", str(tmp_path), "--update"])
    with pytest.raises(RuntimeError, match="cut short"):
        mod.main()
    rows = json.loads((tmp_path / "cpu_engine.json").read_text())["rows"]
    assert [r["scheme"] for r in rows] == ["ed25519", "bls12-381"]  # scheme order; the older row kept
    assert "| ed25519 |" in (tmp_path / "cpu_engine.md").read_text()
