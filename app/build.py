"""Which build this is: the version and the commit it was built from, for ``zapverify
--version``, the open ``GET /v1/info`` and the log's first line; and how to add an optional
extra to this installation (:func:`install_command`).

The commit is ``$ZAPVERIFY_BUILD_COMMIT`` where the build set it (the container images take it
as the ``COMMIT`` build argument: they hold no ``.git``), else ``git rev-parse HEAD`` of the
checkout the package runs from (a clone, ``make run``), else ``"unknown"``.  Read once.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from app import __version__

#: The environment variable a build sets to the commit it was built from.
COMMIT_ENV = "ZAPVERIFY_BUILD_COMMIT"
_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def commit() -> str:
    """The 40-hex commit this build came from, or ``"unknown"``; asks git at most once (1 s bound)."""
    given = os.environ.get(COMMIT_ENV, "").strip()
    if given:
        return given
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True, timeout=1,
                             check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out if len(out) == 40 and all(c in "0123456789abcdef" for c in out) else "unknown"


def describe() -> str:
    """``zapverify 0.1.0 (commit 1a2b3c4d5e6f)``: what ``zapverify --version`` prints."""
    c = commit()
    return f"zapverify {__version__} (commit {c[:12] if c != 'unknown' else c})"


def install_command(extra: str) -> str:
    """The command that adds the optional dependencies ``extra`` (pyproject.toml's
    ``[project.optional-dependencies]``) to the environment running this: from a clone (this
    package beside its ``pyproject.toml``), an editable install of the clone with that extra,
    as ``make install`` installs it; otherwise the package with the extra."""
    if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "app" / "__init__.py").is_file():
        return f"{sys.executable} -m pip install -e '{_ROOT}[{extra}]'"
    return f"{sys.executable} -m pip install 'zapverify[{extra}]'"
