"""The scripts and their results: every Python script is linted, every result in
bench/results/ names the commit it measured, bench/results/README.md is what
scripts/results_index writes, and the one-entry-per-job scripts answer their command lines."""

from __future__ import annotations

import fnmatch
import json
import re
import runpy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bench import provenance

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
index = runpy.run_path(str(ROOT / "scripts" / "results_index"), run_name="results_index")
SHA = re.compile(r"[0-9a-f]{40}(\+dirty)?")


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------ lint
def test_ruff_covers_every_python_script_and_names_only_files_that_exist():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["extend-include"]
    for pattern in patterns:
        assert list(ROOT.glob(pattern)), f"pyproject.toml's ruff extend-include names {pattern!r}: no such file"
    python = [f"scripts/{p.name}" for p in sorted((ROOT / "scripts").iterdir())
              if p.is_file() and not p.suffix and p.read_text(errors="replace").startswith("#!/usr/bin/env python")]
    assert "scripts/agreement" in python and "scripts/results_index" in python
    unlinted = [s for s in python if not any(fnmatch.fnmatch(s, pat) for pat in patterns)]
    assert not unlinted, f"add to [tool.ruff] extend-include in pyproject.toml: {unlinted}"


# ------------------------------------------------------------------ results
def test_every_result_names_the_commit_it_measured():
    found = index["results"]()
    assert len(found) > 20
    for path in found:
        prov = provenance.parse(path.read_text())
        assert prov is not None, f"{path.name} has no provenance line: run scripts/results_index"
        assert SHA.fullmatch(prov["commit"]), f"{path.name}: commit {prov['commit']!r}"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", prov["date"]), path.name


def test_the_results_readme_is_what_results_index_writes():
    assert (RESULTS / "README.md").read_text() == index["render"](), \
        "bench/results/README.md is stale: run scripts/results_index"


def test_predictions_and_simulations_are_labelled_in_the_results_readme():
    readme = (RESULTS / "README.md").read_text()
    labels = {"PREDICTION": "**PREDICTED**", "SIMULATION": "**SIMULATED**"}
    for path in index["results"]():
        kind = provenance.parse(path.read_text())["kind"]
        if kind in labels:
            [row] = [line for line in readme.splitlines() if line.startswith(f"| [{path.name}]")]
            assert labels[kind] in row
    # The simulator's timing record is a SIMULATION, not a measurement of a GPU.
    assert provenance.parse((RESULTS / "gpusim_timing.md").read_text())["kind"] == "SIMULATION"


def test_provenance_lines_round_trip():
    prov = provenance.collect()
    assert SHA.fullmatch(prov["commit"]) and prov["machine"]["cores"] >= 1
    for line in (provenance.markdown_line(prov), provenance.text_line(prov, "PREDICTION", "a model")):
        back = provenance.parse(f"# Title\n\n{line}\n")
        assert (back["commit"], back["date"]) == (prov["commit"], prov["date"])
    assert provenance.parse(provenance.text_line(prov, "PREDICTION", "m"))["kind"] == "PREDICTION"
    assert provenance.parse(provenance.markdown_line(prov, "SIMULATION", "a simulator"))["kind"] == "SIMULATION"
    for kind in ("PREDICTION", "SIMULATION"):
        with pytest.raises(ValueError):
            provenance.markdown_line(prov, kind)  # a prediction or a simulation must name its method
    with pytest.raises(ValueError):
        provenance.markdown_line(prov, "estimate")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_results_index_stamps_old_results_from_git_and_writes_the_index(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    res = tmp_path / "results"
    res.mkdir()
    (res / "old.md").write_text("# Old benchmark\n\nWritten by `bench/old.py`.\n\n| a |\n|---|\n| 1 |\n")
    (res / "old.json").write_text("{}")
    (res / "guess.md").write_text("# PREDICTED rates\n\n| a |\n|---|\n| 2 |\n")
    (res / "later.md").write_text("# Not measured yet\n\nNo GPU was lent.\n")
    (res / "report.txt").write_text("# ptxas report\n# kernel sources sha256: 00\n\nentry regs\n")
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "results"], cwd=tmp_path, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True,
                         check=True).stdout.strip()
    script = str(ROOT / "scripts" / "results_index")
    assert _run(script, "--check", "--results", str(res)).returncode == 1  # nothing names a commit yet
    assert _run(script, "--results", str(res)).returncode == 0
    kinds = {p.name: provenance.parse(p.read_text()) for p in index["results"](res)}
    assert {n: k["kind"] for n, k in kinds.items()} == {"old.md": "measurement", "guess.md": "PREDICTION",
                                                        "later.md": "note", "report.txt": "measurement"}
    assert all(k["commit"] == sha and k["commit_source"] == provenance.FROM_GIT_LOG for k in kinds.values())
    old = (res / "old.md").read_text().splitlines()
    assert old[0] == "# Old benchmark" and old[2].startswith("Provenance: measurement recorded at commit")
    assert old[4:] == ["Written by `bench/old.py`.", "", "| a |", "|---|", "| 1 |"]  # the numbers stay
    assert (res / "report.txt").read_text().splitlines()[2].startswith("# Provenance:")
    readme = (res / "README.md").read_text()
    assert "4 results: 2 measured, 1 PREDICTED, 0 SIMULATED, 1 note." in readme
    assert f"recorded at `{sha[:12]}`" in readme
    assert "| [old.md](old.md) | Old benchmark | measured |" in readme and "| old.json |" in readme
    before = {p.name: p.read_text() for p in res.iterdir()}
    assert _run(script, "--results", str(res)).returncode == 0  # a second run changes nothing
    assert {p.name: p.read_text() for p in res.iterdir()} == before
    assert _run(script, "--check", "--results", str(res)).returncode == 0
    # A writer runs again: its new provenance line makes the index stale until it is rewritten.
    prov = provenance.collect(root=tmp_path)
    (res / "old.md").write_text(f"# Old benchmark\n\n{provenance.markdown_line(prov)}\n\n| a |\n|---|\n| 3 |\n")
    stale = _run(script, "--check", "--results", str(res))
    assert stale.returncode == 1 and "run scripts/results_index" in stale.stderr
    (res / "orphan.json").write_text("{}")
    assert "data without a page: orphan.json" in _run(script, "--results", str(res)).stderr


# ------------------------------------------------------------------ the scripts' command lines
def test_agreement_lists_every_scheme_and_each_schemes_own_options():
    out = _run("scripts/agreement", "--help")
    assert out.returncode == 0, out.stderr
    for scheme in ("ed25519", "secp256k1", "ml-dsa", "slh-dsa", "bls12-381", "bls12-381-arith"):
        assert scheme in out.stdout
    ml = _run("scripts/agreement", "--scheme", "ml-dsa", "--help")
    assert ml.returncode == 0 and "ml-dsa-44" in ml.stdout and "--valid" in ml.stdout
    assert "--signer" in _run("scripts/agreement", "--scheme", "slh-dsa", "--help").stdout
    assert _run("scripts/agreement").returncode == 2  # --scheme is required


def test_agreement_run_records_provenance_and_counts(tmp_path):
    out = _run("scripts/agreement", "--scheme", "ed25519", "--valid", "4", "--mutated", "10", "--mixed", "4",
               "--workers", "1", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "ed25519_agreement.json").read_text())
    [row] = result["sets"]
    assert row["items"] == 18 and row["disagreements"] == 0 and row["zv_check_failures"] == 0
    md = (tmp_path / "ed25519_agreement.md").read_text()
    assert provenance.parse(md)["commit"] == result["provenance"]["commit"]
    assert "**18 items, 0 disagreements**" in md


def test_agreement_keeps_a_result_of_the_scripts_it_replaced_unless_told(tmp_path):
    """A quick run must not wipe a full-size result written by the per-scheme scripts
    before scripts/agreement (rows of another shape, which it can neither compare nor keep)."""
    legacy = {"generated_by": "an earlier script", "sets": [{"scheme": "ed25519", "checked": 200_000}]}
    (tmp_path / "ed25519_agreement.json").write_text(json.dumps(legacy))
    out = _run("scripts/agreement", "--scheme", "ed25519", "--valid", "2", "--out", str(tmp_path))
    assert out.returncode == 2 and "--replace replaces the whole file" in out.stderr
    assert json.loads((tmp_path / "ed25519_agreement.json").read_text()) == legacy


def test_ptxas_lists_every_compilation_unit_of_the_registry():
    from app.engine.device import registry

    out = _run("scripts/ptxas", "--list")
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0] for line in out.stdout.splitlines()}
    assert listed == {p.stem for p in registry.sources()}
    assert "kernels_ptxas_ed25519.txt" in out.stdout
    bad = _run("scripts/ptxas", "--kernel", "nonesuch")
    assert bad.returncode == 2 and "unknown kernel" in bad.stderr
