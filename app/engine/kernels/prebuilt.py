"""Kernels compiled ahead of time, so a GPU start compiles nothing (docs/kernels.md, "Compiled kernels").

NVRTC builds the four verify modules in about two minutes on two cores; a service must not
wait for that at every start, nor every new container.  So a module is looked up, in order:

1. a **fatbin** for this source digest and CUDA major version in the shipped folder
   (``$ZAPVERIFY_KERNEL_PREBUILT``; the CUDA image fills it at build time with
   ``zapverify build-kernels``) or in the cache folder (``$ZAPVERIFY_KERNEL_CACHE/fatbin``);
2. else, where ``nvcc`` is on the PATH, one is built into the cache folder (SASS for
   :data:`ARCHS` plus PTX of the newest, which the driver compiles once for newer GPUs);
3. else NVRTC compiles the text, with CuPy's on-disk cache pointed at the cache folder so
   the second start finds it.

The key of a fatbin is ``<name>-<sources digest>-cuda<major>-<archs>``: any change to a
``.cu``/``.cuh`` file makes a new key, and a fatbin from one CUDA major version is never
loaded under another (a newer minor version runs an older minor's SASS, so minors share).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from app.engine.kernels.hostbuild import KERNEL_DIR, sources_digest
from app.engine.kernels.registry import KernelSource
from app.errors import KernelBuildError

#: Real architectures a fatbin carries SASS for (A100, H100/H200); PTX of the last one is
#: added so Blackwell and later GPUs JIT it once (the driver caches the result).
ARCHS = ("80", "90")


class NvccError(KernelBuildError):
    """nvcc rejected a kernel source (the message holds its output)."""


def cache_dir() -> Path:
    """Where built fatbins go: ``$ZAPVERIFY_KERNEL_CACHE/fatbin`` (default under ~/.cache)."""
    base = Path(os.environ.get("ZAPVERIFY_KERNEL_CACHE", Path.home() / ".cache" / "zapverify" / "kernels"))
    return base / "fatbin"


def shipped_dir() -> Path | None:
    """The read-only folder of fatbins shipped with an image (``$ZAPVERIFY_KERNEL_PREBUILT``)."""
    value = os.environ.get("ZAPVERIFY_KERNEL_PREBUILT")
    return Path(value) if value else None


def nvcc() -> str | None:
    """The nvcc on the PATH (or ``$NVCC``), or None."""
    for cand in (os.environ.get("NVCC"), "nvcc"):
        if cand and shutil.which(cand):
            return cand
    return None


def nvcc_major(compiler: str) -> int:
    """The CUDA major version of ``compiler`` (``nvcc --version``: "release 13.0, ...")."""
    out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release (\d+)\.", out)
    if m is None:
        raise NvccError(f"cannot read the CUDA version from {compiler} --version: {out[-200:]!r}")
    return int(m.group(1))


def key(source: KernelSource, cuda_major: int, archs: tuple[str, ...] = ARCHS) -> str:
    """The file name (without suffix) of ``source``'s fatbin; see the module doc."""
    digest = hashlib.sha256((sources_digest(*dict.fromkeys([source.directory, KERNEL_DIR]))).encode()).hexdigest()
    return f"{source.name}-{digest[:20]}-cuda{cuda_major}-sm{'_'.join(archs)}"


def find(source: KernelSource, cuda_major: int, archs: tuple[str, ...] = ARCHS) -> Path | None:
    """An existing fatbin of ``source`` (shipped first, then cached), or None."""
    name = key(source, cuda_major, archs) + ".fatbin"
    for folder in (shipped_dir(), cache_dir()):
        if folder is not None and (folder / name).is_file():
            return folder / name
    return None


def build(source: KernelSource, *, compiler: str | None = None, archs: tuple[str, ...] = ARCHS,
          out_dir: Path | None = None) -> Path:
    """Compile ``source`` with nvcc into ``<out_dir or cache_dir()>/<key>.fatbin``; return it.

    Returns the existing file without running nvcc when it is already there.  Raises
    :class:`NvccError` when no nvcc is found or it fails.
    """
    compiler = compiler or nvcc()
    if compiler is None:
        raise NvccError("no nvcc on the PATH (set NVCC)")
    out = (out_dir or cache_dir()) / (key(source, nvcc_major(compiler), archs) + ".fatbin")
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    gencode.append(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}")
    includes = [f"-I{d}" for d in dict.fromkeys([source.directory, KERNEL_DIR])]
    # Written beside the target and renamed, so a concurrent start never loads half a file.
    fd, tmp = tempfile.mkstemp(suffix=".fatbin", dir=out.parent)
    os.close(fd)
    proc = subprocess.run([compiler, "--fatbin", "-std=c++17", *includes, *gencode, "-o", tmp, str(source.path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp)
        raise NvccError(f"nvcc failed on {source.name}.cu:\n{proc.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


def load_module(cp: Any, source: KernelSource, code: str, options: tuple[str, ...]) -> Any:
    """A ``cupy.RawModule`` of ``source``: a prebuilt or freshly nvcc-built fatbin when it can
    be had, else NVRTC on ``code``/``options`` with a persistent cache (see the module doc).

    ``cp`` is the CuPy module (tests pass a stand-in).  Raises what CuPy raises for a bad
    module, and :class:`NvccError` when nvcc is present but rejects the source.
    """
    major = int(cp.cuda.runtime.runtimeGetVersion()) // 1000
    path = find(source, major)
    if path is None and nvcc() is not None and nvcc_major(nvcc() or "nvcc") == major:
        path = build(source)
    if path is not None:
        return cp.RawModule(path=str(path))
    # NVRTC: CuPy keeps what it compiled in $CUPY_CACHE_DIR; keep it beside our fatbins so
    # it survives like them (CuPy reads the variable when it compiles).
    os.environ.setdefault("CUPY_CACHE_DIR", str(cache_dir().parent / "nvrtc"))
    return cp.RawModule(code=code, options=options)
