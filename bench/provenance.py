"""Provenance of a result file: which commit was measured, when (UTC) and on what machine.

Every writer of ``bench/results/`` (the ``bench/*.py`` benchmarks and the scripts that write
there) calls :func:`collect` once, before it measures, stores the dict under ``"provenance"``
in its JSON and puts :func:`markdown_line` under the title of its ``.md`` (or
:func:`text_line` in the header of a ``.txt``).  ``scripts/results_index`` reads those lines
back with :func:`parse` to build ``bench/results/README.md``.

Standard library only: ``scripts/gpu_check`` imports this on a lent GPU host that has
numpy and CuPy and nothing else (and possibly no git: the commit is then ``"unknown"``
unless the caller knows it from elsewhere, see :func:`collect`).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What a result file holds: numbers that ran ("measurement"), numbers computed from a model
#: of a machine nobody ran on ("PREDICTION", in capitals wherever it is printed), numbers a
#: simulator of such a machine produced ("SIMULATION": GPGPU-Sim's timing mode, likewise in
#: capitals), or a page that records no number ("note": why something is not measured yet).
KINDS = ("measurement", "PREDICTION", "SIMULATION", "note")
#: The kinds whose numbers come from a model or a simulator: each must name its method.
MODELLED = ("PREDICTION", "SIMULATION")

#: ``commit_source`` of a commit taken from ``git log`` after the fact (see scripts/results_index).
FROM_GIT_LOG = "from git log: the last commit that wrote this file; its writer recorded no commit"


def _run(cmd: list[str], cwd: Path) -> str:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True, timeout=30).stdout


def commit(root: Path = ROOT) -> str:
    """``git rev-parse HEAD`` of ``root``, with ``+dirty`` when ``git status`` lists any change
    (untracked files included: a new source file changes what is measured); ``"unknown"``
    where git or the repository is missing."""
    try:
        sha = _run(["git", "rev-parse", "HEAD"], root).strip()
        dirty = _run(["git", "status", "--porcelain"], root).strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def _gpus() -> list[str]:
    """GPU names from ``nvidia-smi`` (empty where there is none or no driver)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = _run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader"], Path.cwd())
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def machine() -> dict:
    """CPU model, logical cores, memory (bytes), GPUs (``nvidia-smi`` names, may be empty),
    operating system and architecture of this machine."""
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "memory_bytes": _memory_bytes(), "gpus": _gpus(),
            "system": platform.system(), "arch": platform.machine(), "python": platform.python_version()}


def collect(root: Path = ROOT, fallback_commit: str | None = None, fallback_source: str = "") -> dict:
    """The provenance of a run starting now: ``commit`` (see :func:`commit`),
    ``commit_source``, ``date`` (UTC, ISO 8601) and ``machine`` (see :func:`machine`).

    Where git cannot say (a copy of the tree without ``.git``), ``fallback_commit`` is used
    when given, with ``fallback_source`` saying where it came from."""
    sha, source = commit(root), "git rev-parse HEAD"
    if sha == "unknown" and fallback_commit:
        sha, source = fallback_commit, fallback_source or "given by the caller"
    return {"commit": sha, "commit_source": source, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine()}


def describe_machine(m: dict) -> str:
    """One line: ``Intel(R) Xeon(R) Processor, 2 cores, 7.8 GiB memory, no GPU``."""
    mem = f"{m['memory_bytes'] / 2**30:.1f} GiB memory" if m.get("memory_bytes") else "memory unknown"
    gpus = ", ".join(m.get("gpus") or []) or "no GPU"
    return f"{m.get('cpu', 'unknown CPU')}, {m.get('cores')} cores, {mem}, {gpus}"


def markdown_line(prov: dict, kind: str = "measurement", method: str | None = None) -> str:
    """The provenance line a result's ``.md`` carries under its title.  ``kind`` is one of
    :data:`KINDS`; a PREDICTION or a SIMULATION names its ``method`` (required for one)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if kind in MODELLED and not method:
        raise ValueError(f"a {kind} must name its method")
    what = f"{kind} (method: {method})" if kind in MODELLED else kind
    source = "" if prov.get("commit_source", "git rev-parse HEAD") == "git rev-parse HEAD" \
        else f" ({prov['commit_source']})"
    where = f", on {describe_machine(prov['machine'])}" if prov.get("machine") else ""
    return f"Provenance: {what} at commit `{prov['commit']}`{source}, {prov['date']}{where}."


def text_line(prov: dict, kind: str = "measurement", method: str | None = None) -> str:
    """:func:`markdown_line` as a ``#`` comment, for the header of a ``.txt`` result."""
    return "# " + markdown_line(prov, kind, method)


def recorded_line(kind: str, sha: str, date: str) -> str:
    """The line ``scripts/results_index`` stamps on a result recorded before its writer named
    a commit: ``sha`` is the commit that last wrote the file (``git log -1``) and ``date``
    that commit's date (UTC, ISO 8601), so the line says *recorded at* that commit (the
    numbers are the file's, not measured again).  A PREDICTION's method is the one the file
    itself describes.  Raises ValueError for a kind not in :data:`KINDS`."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    what = "PREDICTION (method: as described in this file)" if kind == "PREDICTION" else kind
    return f"Provenance: {what} recorded at commit `{sha}` ({FROM_GIT_LOG}), {date}."


_LINE = re.compile(r"^(?:# )?Provenance: (?P<kind>" + "|".join(KINDS) + r")\b.*? "
                   r"at (?:the tree of )?commit "
                   r"`(?P<commit>[^`]+)`(?: \((?P<source>[^)]*)\))?, (?P<date>\d{4}-\d\d-\d\d[0-9T:Z]*)", re.M)


def parse(text: str) -> dict | None:
    """``kind``, ``commit``, ``commit_source`` and ``date`` of the first provenance line in
    ``text`` (None when there is none)."""
    m = _LINE.search(text)
    if m is None:
        return None
    return {"kind": m["kind"], "commit": m["commit"], "commit_source": m["source"] or "git rev-parse HEAD",
            "date": m["date"]}
