"""docs/development.md is the map of scripts/ and bench/: every script and benchmark is in
its tables with a purpose and an audience, and it names no file that does not exist."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "development.md"
AUDIENCES = {"user", "CI", "developer"}
#: Backticked paths under these folders are files of the repository (git-ignored outputs
#: such as .gpu_check_data/ and artifacts/ are written without one of them).
PREFIXES = ("scripts/", "bench/", "docs/", "tests/", "app/", ".ci/", "deploy/", "zapverify/")


def _rows() -> dict[str, list[str]]:
    """The first cell's backticked name -> the row's cells, for every table row of the doc."""
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and (m := re.fullmatch(r"`([^`]+)`", cells[0])):
            rows[m.group(1)] = cells
    return rows


def _scripts() -> list[str]:
    """The entry points of scripts/: executables and .py files at its top (the package
    marker and scripts/lib/, the code they share, aside)."""
    out = []
    for p in sorted((ROOT / "scripts").iterdir()):
        if p.is_file() and p.name != "__init__.py" and (p.suffix == ".py" or os.access(p, os.X_OK)):
            out.append(f"scripts/{p.name}")
    return out


def test_every_script_and_benchmark_has_a_row_with_purpose_and_audience():
    rows = _rows()
    wanted = _scripts() + [f"bench/{p.name}" for p in sorted((ROOT / "bench").glob("*.py"))]
    assert "scripts/agreement" in wanted and "bench/cpu_engine.py" in wanted
    missing = [name for name in wanted if name not in rows]
    assert not missing, f"docs/development.md has no row for {missing}"
    for name in wanted:
        purpose, audience = rows[name][1], rows[name][2]
        assert len(purpose) > 20, f"{name}: no purpose"
        assert {a.strip() for a in audience.split(",")} <= AUDIENCES, f"{name}: audience {audience!r}"


def test_the_doc_names_no_file_that_does_not_exist():
    text = DOC.read_text()
    named = {m for m in re.findall(r"`([^`\s]+)`", text) if m.startswith(PREFIXES) and "<" not in m}
    assert "scripts/ptxas" in named
    gone = sorted(p for p in named if not (ROOT / p.split(" ")[0]).exists())
    assert not gone, f"docs/development.md names files that do not exist: {gone}"
    for name in _rows():  # the tables' own rows, result names aside
        if name.startswith(PREFIXES):
            assert (ROOT / name).exists(), name


def test_the_readme_links_it_and_keeps_its_first_commands():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/development.md)" in readme
    head = readme.split("```", 2)[1]
    assert "make run" in head and "make test" in head
