"""The nvcc check of docs/kernels.md: compile every kernel for sm_90 and read ptxas's
resource report (registers, stack frame, spills, shared memory) per entry point.

Two depths, because ptxas is the slow half (minutes per ML-DSA or BLS module on two cores):
:func:`compile_ptx` runs nvcc's front end to PTX for sm_90 — every source error, every
device-only construct, every entry point's presence — and is what the test suite runs
(tests/test_kernels_nvcc.py); :func:`compile_source` runs ptxas too and reads its report,
which ``scripts/kernels_ptxas`` writes to ``bench/results/kernels_ptxas.txt``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from app.engine.device.hostbuild import KERNEL_DIR

ARCH = "sm_90"
NVCC_FLAGS = ["-std=c++17", f"-arch={ARCH}", "-cubin", "-Xptxas", "-v"]

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass
class EntryUsage:
    """ptxas's report for one entry point (bytes and register counts)."""

    entry: str
    registers: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    shared_bytes: int = 0  # static shared memory per block


@dataclass
class CompileResult:
    source: str
    ok: bool
    seconds: float
    entries: list[EntryUsage] = field(default_factory=list)
    log: str = ""


def nvcc() -> str | None:
    """Path of nvcc on PATH (or in /usr/local/cuda/bin), or None."""
    return shutil.which("nvcc") or shutil.which("nvcc", path="/usr/local/cuda/bin")


def parse(log: str) -> list[EntryUsage]:
    """Entry points and their resource usage from ``nvcc -Xptxas -v`` output."""
    out: list[EntryUsage] = []
    props_for = None  # the function the next stack-frame line describes
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            out.append(EntryUsage(m.group(1)))
        elif m := _PROPS.search(line):
            props_for = m.group(1)
        elif out and (m := _FRAME.search(line)):
            # Out-of-line device functions (__noinline__) get their own frame line after
            # the entry's; only the entry's own describes the entry.
            if props_for in (None, out[-1].entry):
                out[-1].stack_bytes, out[-1].spill_store_bytes, out[-1].spill_load_bytes = map(int, m.groups())
        elif out and (m := _USED.search(line)):
            out[-1].registers = int(m.group(1))
            if s := _SMEM.search(line):
                out[-1].shared_bytes = int(s.group(1))
    return out


def compile_source(path: Path, timeout: float = 600, cubin: Path | None = None) -> CompileResult:
    """Compile one .cu for :data:`ARCH` to a cubin (kept at ``cubin`` when given, else
    thrown away); never raises for a compile error (``ok`` is False and ``log`` holds the
    compiler's output)."""
    import time

    exe = nvcc()
    if exe is None:
        return CompileResult(path.name, False, 0.0, log="nvcc not found")
    with tempfile.TemporaryDirectory() as tmp:
        out = cubin if cubin is not None else Path(tmp) / "out.cubin"
        cmd = [exe, *NVCC_FLAGS, f"-I{KERNEL_DIR}", f"-I{path.parent}", "-x", "cu", "-o", str(out), str(path)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return CompileResult(path.name, False, timeout, log=f"nvcc timed out after {timeout} s")
        seconds = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    return CompileResult(path.name, proc.returncode == 0, seconds, parse(log), log)


_PTX_ENTRY = re.compile(r"^\.visible \.entry (\w+)\(", re.M)


def compile_ptx(path: Path, timeout: float = 900) -> CompileResult:
    """Compile one .cu to PTX for :data:`ARCH` (nvcc's front end only, no ptxas); the
    result's entries name every ``.entry`` of the PTX (no resource figures).  Never raises
    for a compile error (``ok`` is False and ``log`` holds the compiler's output)."""
    import time

    exe = nvcc()
    if exe is None:
        return CompileResult(path.name, False, 0.0, log="nvcc not found")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.ptx"
        cmd = [exe, "-std=c++17", f"-arch={ARCH}", "-ptx", f"-I{KERNEL_DIR}", f"-I{path.parent}", "-x", "cu",
               "-o", str(out), str(path)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return CompileResult(path.name, False, timeout, log=f"nvcc -ptx timed out after {timeout} s")
        seconds = time.perf_counter() - t0
        entries = [EntryUsage(m) for m in _PTX_ENTRY.findall(out.read_text())] if proc.returncode == 0 else []
    return CompileResult(path.name, proc.returncode == 0, seconds, entries, proc.stdout + proc.stderr)


def version() -> str:
    exe = nvcc()
    if exe is None:
        return "nvcc not found"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return next((line for line in out if "release" in line), out[-1] if out else "unknown")


def report(results: list[CompileResult], digest: str) -> str:
    """The text of bench/results/kernels_ptxas.txt."""
    lines = [f"# ptxas resource usage per kernel entry point ({ARCH})",
             "# written by scripts/kernels_ptxas; do not edit by hand",
             f"# {version()}",
             f"# flags: {' '.join(NVCC_FLAGS)}",
             f"# kernel sources sha256: {digest}",
             "",
             f"{'source':<16} {'entry':<28} {'regs':>5} {'stack B':>8} {'spill st B':>11} {'spill ld B':>11}"]
    for r in results:
        if not r.ok:
            lines.append(f"{r.source:<16} COMPILE FAILED")
            continue
        for e in r.entries:
            lines.append(f"{r.source:<16} {e.entry:<28} {e.registers:>5} {e.stack_bytes:>8} "
                         f"{e.spill_store_bytes:>11} {e.spill_load_bytes:>11}")
    return "\n".join(lines) + "\n"
