"""bench/attacks.py: a quick run of its cheap sections against real servers writes both result
files, each section with its checks and a pass verdict, and the exit status follows them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import provenance

ROOT = Path(__file__).resolve().parent.parent
CHEAP = ["keys-in-logs", "ws-rate-limit", "ws-deep-json"]


@pytest.mark.slow
def test_quick_run_writes_json_and_markdown_with_a_verdict_per_section(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "attacks.py"), "--quick", "--only", ",".join(CHEAP),
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "attacks.json").read_text())
    assert result["quick"] is True and result["only"] == CHEAP
    assert result["provenance"]["commit"]
    assert [s["name"] for s in result["sections"]] == CHEAP
    for section in result["sections"]:
        assert section["skipped"] is None, section["name"]
        assert section["checks"] and all(isinstance(v, bool) for v in section["checks"].values()), section["name"]
        assert section["pass"] is all(section["checks"].values()), section["name"]
        assert section["lines"] and section["seconds"] > 0
    assert result["pass"] is all(s["pass"] for s in result["sections"])
    assert proc.returncode == (0 if result["pass"] else 1)
    # what each section measured is there, not only its verdict
    by_name = {s["name"]: s for s in result["sections"]}
    assert set(by_name["keys-in-logs"]["data"]) == {"debug", "info"}
    assert sum(by_name["ws-rate-limit"]["data"]["replies"].values()) > 0
    assert by_name["ws-deep-json"]["data"]["rounds"] >= 1

    md = (tmp_path / "attacks.md").read_text()
    assert md.startswith("# Attacks on a live server")
    assert provenance.parse(md) is not None and provenance.parse(md)["kind"] == "measurement"
    for section in result["sections"]:
        assert f"`{section['name']}`" in md and section["title"] in md
    assert md.count("| check | result |") == len(CHEAP)


def test_unknown_section_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "attacks.py"), "--only", "no-such-attack",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown section" in proc.stderr
    assert not (tmp_path / "attacks.json").exists()
