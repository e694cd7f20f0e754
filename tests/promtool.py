"""promtool, Prometheus's checker (Debian's ``prometheus`` package), for the tests of the
exposition, the alert rules and the dashboard's queries: a test that needs it is skipped
where it is absent, and fails under ``CI=true``, where .ci/run installs it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def promtool() -> str:
    """The path of promtool; skips the calling test without it (fails it under CI=true)."""
    exe = shutil.which("promtool")
    if exe:
        return exe
    reason = "promtool is absent (Debian's prometheus package: apt-get install prometheus; .ci/run installs it)"
    if IN_CI:
        pytest.fail(f"{reason}; CI=true requires it", pytrace=False)
    pytest.skip(reason)


def run(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``promtool ARGS``; asserts it exits 0, with its output in the message."""
    done = subprocess.run([promtool(), *args], input=stdin, capture_output=True, text=True, cwd=cwd, timeout=120)
    assert done.returncode == 0, f"promtool {' '.join(args)}: rc {done.returncode}\n{done.stdout}{done.stderr}"
    return done
