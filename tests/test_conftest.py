"""The suite's rule for external vectors: absent ones skip locally and fail under CI=true."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

#: A vector test that needs only the vector folder (no engine start-up).
TARGET = "tests/test_slh_dsa_oracle.py::test_acvp_vectors_match_the_source_verdicts"


def _run(tmp_path, ci: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ZAPVERIFY_VECTORS_DIR": str(tmp_path / "no-vectors-here"), "CI": ci}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", TARGET],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_absent_vectors_skip_outside_ci(tmp_path):
    r = _run(tmp_path, "false")
    assert r.returncode == 0 and "1 skipped" in r.stdout and "no-vectors-here is absent" in r.stdout


def test_absent_vectors_fail_under_ci(tmp_path):
    r = _run(tmp_path, "true")
    # pytest.fail in a fixture is an error at setup: the run fails either way.
    assert r.returncode == 1 and "1 error" in r.stdout and "CI=true requires the vectors" in r.stdout
