"""What a GPU check ran on: driver, CUDA runtime, NVRTC and nvcc versions, clocks, PCIe link
and memory (``nvidia-smi -q``), and the Python side.  Every probe has a timeout and says
what failed instead of raising: the environment is recorded before anything can go wrong."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from typing import Any

#: The ``nvidia-smi -q`` sections kept (the rest is processes, ECC pages, ...).
SMI_SECTIONS = ("Clocks", "Max Clocks", "Applications Clocks", "Default Applications Clocks", "PCI",
                "FB Memory Usage", "Performance State", "Clocks Event Reasons", "Power Readings",
                "GPU Power Readings", "Temperature")


def _run(cmd: list[str], timeout: float = 20) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"<{type(exc).__name__}: {exc}>"


def smi() -> dict[str, Any]:
    """``nvidia-smi -q`` of GPU 0, the sections of :data:`SMI_SECTIONS` as nested dicts, with
    the driver and CUDA versions it reports; ``{"error": ...}`` without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"error": "no nvidia-smi on the PATH"}
    text = _run([exe, "-q", "-i", "0"])
    out: dict[str, Any] = {}
    for key in ("Driver Version", "CUDA Version", "Product Name"):
        m = re.search(rf"^\s*{re.escape(key)}\s*:\s*(.+)$", text, re.M)
        if m:
            out[key] = m.group(1).strip()
    # Sections are headed by an indented name on a line of its own; their fields are
    # "name : value" lines indented deeper.
    stack: list[tuple[int, dict]] = [(-1, out)]
    keep_depth: int | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        if keep_depth is not None and indent <= keep_depth:
            keep_depth = None
        name, sep, value = (s.strip() for s in line.partition(":"))
        if not sep or not value:  # a section heading
            if keep_depth is None and name in SMI_SECTIONS:
                keep_depth = indent
            if keep_depth is not None:
                child: dict = {}
                stack[-1][1][name] = child
                stack.append((indent, child))
        elif keep_depth is not None:
            stack[-1][1][name] = value
    return out or {"error": text[-500:]}


def cuda(cp: Any) -> dict[str, Any]:
    """Driver and runtime versions through CuPy (``cp``), NVRTC's through CuPy and through
    our own loader, the nvcc on the PATH."""
    out: dict[str, Any] = {"cupy": getattr(cp, "__version__", "?")}
    for key, fn in (("driver", lambda: cp.cuda.runtime.driverGetVersion()),
                    ("runtime", lambda: cp.cuda.runtime.runtimeGetVersion()),
                    ("nvrtc_cupy", lambda: cp.cuda.nvrtc.getVersion())):
        try:
            out[key] = fn()
        except Exception as exc:  # a probe never stops the check
            out[key] = f"<{type(exc).__name__}: {exc}>"
    return out


def toolchain() -> dict[str, Any]:
    """nvcc's version line and our NVRTC loader's version, where they exist."""
    out: dict[str, Any] = {}
    nvcc = shutil.which("nvcc")
    out["nvcc"] = _run([nvcc, "--version"]).strip().splitlines()[-1:] if nvcc else None
    try:
        from app.engine.device import nvrtc

        out["nvrtc"] = ".".join(map(str, nvrtc.version()))
    except Exception as exc:
        out["nvrtc"] = f"<{type(exc).__name__}: {exc}>"
    return out


def python() -> dict[str, Any]:
    import numpy as np

    return {"python": platform.python_version(), "machine": platform.machine(), "numpy": np.__version__}
