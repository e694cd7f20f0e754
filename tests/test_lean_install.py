"""A lean install: ``make run`` installs the runtime dependencies only, into the one venv that
``make test`` and ``make lint`` then add the test extra to (two stamps in the Makefile).  The
test tools (Playwright, mypy, the NVRTC wheel, ...) are never among what serving pulls in,
directly or through another package; the images install no test extra either."""

from __future__ import annotations

import re
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: What the issue measured as unused to serve (~330 MB of a 637 MB venv), and the other test tools.
TEST_TOOLS = {"playwright", "mypy", "nvidia-cuda-nvrtc", "pytest", "ruff", "hypothesis", "grimp", "py-ecc"}


def makefile() -> tuple[dict[str, str], dict[str, tuple[list[str], list[str]]]]:
    """The Makefile's variables and its rules: target -> (prerequisites, recipe lines), with
    ``$(VAR)`` expanded."""
    variables: dict[str, str] = {}
    rules: dict[str, tuple[list[str], list[str]]] = {}

    def expand(text: str) -> str:
        for _ in range(5):
            text = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), text)
        return text

    current: list[str] | None = None
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("\t") and current is not None:
            current.append(expand(line.strip()))
            continue
        current = None
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if m := re.fullmatch(r"(\w+)\s*(?::=|\?=|=)\s*(.*)", line):
            variables[m.group(1)] = expand(m.group(2).strip())
        elif (m := re.fullmatch(r"([^:=\s][^:=]*):\s*(.*)", line)) and not line.startswith("."):
            current = []
            rules[expand(m.group(1).strip())] = (expand(m.group(2)).split(), current)
    return variables, rules


def pip_installs(recipe: list[str]) -> list[str]:
    """What each ``pip install`` line of a recipe installs (``.``, ``'.[test]'``...), pip itself aside."""
    out = []
    for line in recipe:
        if m := re.search(r"-m pip install\b(.*)", line):
            out.extend(a.strip("'\"") for a in m.group(1).split() if not a.startswith("-") and a != "pip")
    return out


def test_make_run_installs_the_runtime_and_make_test_adds_the_test_extra():
    _, rules = makefile()
    (run_stamp,) = rules["run"][0]
    (test_stamp,) = rules["test"][0]
    assert run_stamp != test_stamp
    assert pip_installs(rules[run_stamp][1]) == ["."]  # no extra at all
    assert any("venv" in line for line in rules[run_stamp][1])  # a fresh clone: it makes the venv
    assert pip_installs(rules[test_stamp][1]) == [".[test]"]
    # the test stamp builds on the run stamp (one venv), and both follow pyproject.toml
    assert run_stamp in rules[test_stamp][0] and "pyproject.toml" in rules[run_stamp][0]
    for target in ("lint", "install"):  # scripts/system_test and container_test run `make install`
        assert rules[target][0] == [test_stamp], target
    assert rules["bench"][0] == [run_stamp]
    for stamp in (run_stamp, test_stamp):
        assert rules[stamp][1][-1] == f"touch {stamp}"


def _closure(requirements: list[str], extras: frozenset[str] = frozenset()) -> set[str]:
    """The distributions ``requirements`` pull in, transitively, as installed here (markers
    evaluated for this interpreter; a requirement's extras followed)."""
    seen: set[str] = set()
    todo = [(Requirement(r), extras) for r in requirements]
    while todo:
        req, wanted = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
            continue
        name = canonicalize_name(req.name)
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            raise AssertionError(f"{req.name} (a runtime dependency) is not installed here") from None
        todo.extend((Requirement(r), frozenset(req.extras)) for r in requires)
    return {k.split("[")[0] for k in seen}


def test_what_serving_pulls_in_has_no_test_tool():
    runtime = PYPROJECT["project"]["dependencies"]
    closure = _closure(runtime)
    assert {"fastapi", "uvicorn", "prometheus-client", "numpy"} <= closure
    assert not closure & TEST_TOOLS, sorted(closure & TEST_TOOLS)
    # and the test extra still has them: `make test` must keep working
    test = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert {"playwright", "mypy", "nvidia-cuda-nvrtc", "pytest", "ruff"} <= test


def test_images_install_no_test_extra():
    for name in ("Dockerfile", "Dockerfile.cuda"):
        lines = [line for line in (ROOT / name).read_text().splitlines() if "pip install" in line]
        assert lines, name
        for line in lines:
            assert "[test" not in line and ",test" not in line and "playwright" not in line and "mypy" not in line, \
                f"{name}: {line.strip()}"


def test_the_package_carries_every_file_app_reads():
    """Every tracked non-Python file under ``app/`` is package data, so an installed copy (the
    images' ``pip install .``) has what a source checkout has: ``native_ml_dsa_simd.inc``, left
    out once, made the images' native loops fall back to the Python loop."""
    tracked = subprocess.run(["git", "ls-files", "app"], cwd=ROOT, capture_output=True, text=True, check=True)
    wanted = {Path(p) for p in tracked.stdout.split() if not p.endswith(".py")}
    assert wanted, "git ls-files found nothing under app/"
    shipped = {path.relative_to(ROOT) for pattern in PYPROJECT["tool"]["setuptools"]["package-data"]["app"]
               for path in (ROOT / "app").glob(pattern) if path.is_file()}
    assert wanted <= shipped, sorted(map(str, wanted - shipped))
