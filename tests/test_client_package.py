"""The client is its own top-level package: ``from zapverify import Client`` in the installed
project, from any directory (not only from the repository root, where ``app`` is on the path)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_installed_project_imports_the_client_from_elsewhere(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import zapverify, pathlib; from zapverify import Client, RemoteError, verify_inclusion; "
            "print(pathlib.Path(zapverify.__file__).resolve().parent.name, Client.__module__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == ["zapverify", "zapverify.http"]


def test_the_distribution_carries_both_packages():
    # What setuptools packs: the server under app, the client under zapverify, nothing else top-level.
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    top = {p.split(".")[0] for p in find_packages(str(ROOT), include=include)}
    assert top == {"app", "zapverify"}
