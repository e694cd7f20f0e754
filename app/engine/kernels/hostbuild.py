"""Host build of the kernel sources: the same .cu files the GPU runs, compiled by g++.

``load("hash")`` compiles ``app/engine/kernels/hash.cu`` (and whatever headers it
includes) into a shared library with the system C++ compiler and loads it with ctypes.
The library is cached under ``$ZAPVERIFY_KERNEL_CACHE`` (default ``~/.cache/zapverify/kernels``)
by a hash of every source in this folder and the compiler command, so it is rebuilt exactly
when a source changes.  Kernels then run with one host "thread" (see zv_port.cuh).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent
CXXFLAGS = ["-x", "c++", "-std=c++17", "-O2", "-shared", "-fPIC", "-fno-strict-aliasing",
            "-Wall", "-Wno-unused-function"]

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}


class HostBuildError(RuntimeError):
    """The C++ compiler is missing or rejected a kernel source (the message holds its output)."""


def compiler() -> str | None:
    """The C++ compiler used for host builds (``$CXX``, else g++, else c++), or None."""
    for cand in (os.environ.get("CXX"), "g++", "c++"):
        if cand and shutil.which(cand):
            return cand
    return None


def _cache_dir() -> Path:
    return Path(os.environ.get("ZAPVERIFY_KERNEL_CACHE", Path.home() / ".cache" / "zapverify" / "kernels"))


def sources_digest() -> str:
    """SHA-256 over every kernel source (.cu and .cuh) in this folder, names included."""
    h = hashlib.sha256()
    for p in sorted(KERNEL_DIR.glob("*.cu*")):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def build(name: str) -> Path:
    """Compile ``<name>.cu`` into a cached shared library and return its path.

    Raises :class:`HostBuildError` when no compiler is found or compilation fails.
    """
    src = KERNEL_DIR / f"{name}.cu"
    if not src.is_file():
        raise HostBuildError(f"no kernel source {src}")
    cxx = compiler()
    if cxx is None:
        raise HostBuildError("no C++ compiler (set CXX or install g++)")
    cmd = [cxx, *CXXFLAGS, f"-I{KERNEL_DIR}"]
    key = hashlib.sha256((sources_digest() + " ".join(cmd)).encode()).hexdigest()[:20]
    out = _cache_dir() / f"{name}-{key}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename, so concurrent builders never load a half-written file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    proc = subprocess.run([*cmd, "-o", tmp, str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp)
        raise HostBuildError(f"{cxx} failed on {src.name}:\n{proc.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


def load(name: str) -> ctypes.CDLL:
    """Build (if needed) and load ``<name>.cu``; one CDLL per name per process."""
    with _lock:
        lib = _loaded.get(name)
        if lib is None:
            lib = _loaded[name] = ctypes.CDLL(str(build(name)))
        return lib
