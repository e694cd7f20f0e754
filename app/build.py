"""Which build this is: the version and the commit it was built from, for ``zapverify
--version``, the open ``GET /v1/info`` and the log's first line; and how to add an optional
extra to this installation (:func:`install_command`).

The commit is ``$ZAPVERIFY_BUILD_COMMIT`` where the build set it (the container images take it
as the ``COMMIT`` build argument: they hold no ``.git``), else the ``HEAD`` of the checkout the
package runs from (a clone, ``make run``; read from ``.git`` without running git), else
``"unknown"``.  Read once.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

from app import __version__

#: The environment variable a build sets to the commit it was built from.
COMMIT_ENV = "ZAPVERIFY_BUILD_COMMIT"
_ROOT = Path(__file__).resolve().parents[1]


def source_commit(root: Path = _ROOT) -> str:
    """The commit checked out at ``root`` (the source tree of this package), read from its
    ``.git`` without running git; ``"unknown"`` outside a git checkout (an image, a wheel)."""
    git = root / ".git"
    try:
        if git.is_file():  # a linked worktree: "gitdir: <path>"
            git = (root / git.read_text().split(":", 1)[1].strip()).resolve()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = head[5:].strip()
            for d in (git, common):
                if (d / ref).is_file():
                    head = (d / ref).read_text().strip()
                    break
            else:
                packed = (common / "packed-refs").read_text().splitlines()
                head = next(line.split()[0] for line in packed if line.endswith(" " + ref))
    except (OSError, IndexError, StopIteration, ValueError):
        return "unknown"
    return head if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", head) else "unknown"


@functools.cache
def commit() -> str:
    """The commit this build came from: ``$ZAPVERIFY_BUILD_COMMIT`` where set, else
    :func:`source_commit` of this checkout, else ``"unknown"``.  Read once."""
    return os.environ.get(COMMIT_ENV, "").strip() or source_commit()


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
