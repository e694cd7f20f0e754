"""`zapverify check-vectors` over generated items for all 18 schemes, and its exit codes."""

import json

from app.cli import main
from app.engine.schemes import SCHEMES
from app.vectors import generated, write_jsonl


def test_check_vectors_agrees_on_fresh_generated_items_of_all_18_schemes(tmp_path, capsys):
    path = tmp_path / "generated.jsonl"
    n = write_jsonl(path, generated(2, 2, seed=42))
    assert n == 18 * 4
    assert main(["check-vectors", str(path), "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"vectors={n} agree={n} disagree=0" in out
    for s in SCHEMES:
        assert s in out


def test_check_vectors_exits_1_on_a_disagreement(tmp_path, capsys):
    path = tmp_path / "flipped.jsonl"
    recs = list(generated(1, 0, seed=1, schemes=["ed25519", "secp256k1"]))
    recs[0]["expected"] = not recs[0]["expected"]
    write_jsonl(path, recs)
    assert main(["check-vectors", str(path)]) == 1
    assert "DISAGREE ed25519" in capsys.readouterr().out


def test_selftest_command(capsys):
    assert main(["selftest", "--backend", "cpu"]) == 0
    assert "ready" in capsys.readouterr().out


def test_converter_script_writes_outside_the_repo(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(root / "scripts" / "convert_vectors"), str(tmp_path)], check=True,
                   capture_output=True)
    lines = (tmp_path / "external.jsonl").read_text().splitlines()
    if (root.parent / "shared" / "vectors").is_dir():
        assert len(lines) == 2136
        assert all(json.loads(line_)["source"] for line_ in lines[:10])
    else:
        assert lines == []
