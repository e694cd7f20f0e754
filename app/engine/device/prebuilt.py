"""Kernels compiled ahead of time, so a GPU start compiles nothing (docs/kernels.md, "Compiled kernels").

NVRTC builds the verify modules in minutes on two cores; a service must not wait for that
at every start, nor every new container.  So a module is looked up, in order:

1. a compiled module for this source digest and CUDA major version in the shipped folder
   (``$ZAPVERIFY_KERNEL_PREBUILT``; the CUDA image fills it at build time with
   ``zapverify build-kernels``) or in the cache folder (``$ZAPVERIFY_KERNEL_CACHE/fatbin``):
   an nvcc **fatbin** (SASS for :data:`ARCHS` plus PTX of the newest), else the NVRTC
   **cubin** of the device's architecture family, else the NVRTC **PTX** of the newest
   architecture, which the driver compiles once for a newer GPU;
2. else, where ``nvcc`` of the same CUDA major is on the PATH, a fatbin is built into the
   cache folder (within :data:`NVCC_TIMEOUT`);
3. else, or when nvcc fails, NVRTC compiles the text, with CuPy's on-disk cache pointed at
   the cache folder so the second start finds it.

A caller that must not compile (``scripts/gpu_check`` on a lent GPU, whose minutes are for
measuring) passes ``compile=False`` and gets :class:`KernelBuildError` instead of steps 2–3.
Each load says where its module came from (:func:`load_module`'s origin).

Files are named from the stem ``<name>-<sources digest>-cuda<major>``: any change to a
``.cu``/``.cuh`` file makes a new stem, and a module from one CUDA major version is never
loaded under another (a newer minor version runs an older minor's SASS, so minors share).
A variant (register cap, :data:`registry.REGISTER_CAPS`) adds ``.<variant>`` to the name.
Then ``-sm80_90.fatbin`` (nvcc, its archs in the name), ``.sm_90.cubin`` or
``.compute_90.ptx`` (NVRTC, one target each), for whatever archs were built (``zapverify
build-kernels --arch``).  SASS for ``sm_XY`` runs on any GPU of compute capability X.Z
with Z >= Y; PTX for ``compute_XY`` on any of X.Y or newer.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from app.core.errors import KernelBuildError
from app.engine.device import nvrtc, registry
from app.engine.device.hostbuild import KERNEL_DIR, sources_digest
from app.engine.device.registry import KernelSource

#: Real architectures a fatbin carries SASS for (A100, H100/H200); PTX of the last one is
#: added so Blackwell and later GPUs JIT it once (the driver caches the result).
ARCHS = ("80", "90")
#: Options every NVRTC compile gets (our kernels include only their own headers and
#: NVRTC's built-in ones).
NVRTC_OPTIONS = ("-std=c++17",)
#: Seconds one nvcc build may take before the load falls back to NVRTC (the largest unit,
#: BLS12-381, takes about three minutes on two cores for two archs).
NVCC_TIMEOUT = 900.0


class NvccError(KernelBuildError):
    """nvcc rejected a kernel source (the message holds its output)."""


def cache_dir() -> Path:
    """Where compiled modules built on this host go: ``$ZAPVERIFY_KERNEL_CACHE/fatbin``
    (default under ~/.cache)."""
    base = Path(os.environ.get("ZAPVERIFY_KERNEL_CACHE", Path.home() / ".cache" / "zapverify" / "kernels"))
    return base / "fatbin"


def shipped_dir() -> Path | None:
    """The read-only folder of compiled modules shipped with an image (``$ZAPVERIFY_KERNEL_PREBUILT``)."""
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


def key(source: KernelSource, cuda_major: int) -> str:
    """The stem of ``source``'s compiled files for CUDA ``cuda_major``; see the module doc."""
    digest = hashlib.sha256((_sources_of(source) + " ".join(source.options)).encode()).hexdigest()
    variant = f".{source.variant}" if source.variant else ""
    return f"{source.name}{variant}-{digest[:20]}-cuda{cuda_major}"


def _sources_of(source: KernelSource) -> str:
    """The digests of every source ``source`` may include: the kernel tree's, and its own
    folder's when that lies outside the tree (a test kernel)."""
    inside = source.directory.resolve().is_relative_to(KERNEL_DIR)
    return sources_digest(KERNEL_DIR) + ("" if inside else sources_digest(source.directory))


def targets(archs: tuple[str, ...] = ARCHS) -> list[str]:
    """NVRTC targets of a shipped module: SASS per arch, then PTX of the newest."""
    return [f"sm_{a}" for a in archs] + [f"compute_{archs[-1]}"]


def target_file(stem: str, target: str) -> str:
    """The file name of one NVRTC target's output (``.cubin`` for SASS, ``.ptx``)."""
    return f"{stem}.{target}.{'cubin' if target.startswith('sm_') else 'ptx'}"


def fatbin_file(stem: str, archs: tuple[str, ...] = ARCHS) -> str:
    """The file name of an nvcc fatbin with SASS for ``archs`` and PTX of the newest."""
    return f"{stem}-sm{'_'.join(archs)}.fatbin"


def pick(paths: list[Path], stem: str, cc: tuple[int, int] | None) -> Path | None:
    """Of the compiled files ``paths`` of one ``stem``, the one a GPU of compute capability
    ``cc`` loads best (see the module doc); any fatbin when ``cc`` is unknown; else None.

    Whatever architectures they were built for (``build-kernels --arch``): a fatbin
    serves when one of its SASS archs is of the GPU's family and not newer, or its PTX
    (of its newest arch) is not newer than the GPU; then a cubin of the GPU's family,
    newest first; then the newest PTX not newer than the GPU.
    """
    fatbins: list[tuple[list[int], Path]] = []
    cubins: dict[int, Path] = {}
    ptxs: dict[int, Path] = {}
    for p in paths:
        rest = p.name[len(stem):]
        if m := re.fullmatch(r"-sm([0-9_]+)\.fatbin", rest):
            fatbins.append(([int(a) for a in m.group(1).split("_")], p))
        elif m := re.fullmatch(r"\.sm_(\d+)\.cubin", rest):
            cubins[int(m.group(1))] = p
        elif m := re.fullmatch(r"\.compute_(\d+)\.ptx", rest):
            ptxs[int(m.group(1))] = p
    if cc is None:
        return fatbins[0][1] if fatbins else None
    dev = 10 * cc[0] + cc[1]
    for archs, p in sorted(fatbins):
        if any(a // 10 == cc[0] and a <= dev for a in archs) or max(archs) <= dev:
            return p
    sass = [a for a in cubins if a // 10 == cc[0] and a <= dev]
    if sass:
        return cubins[max(sass)]
    ptx = [a for a in ptxs if a <= dev]
    return ptxs[max(ptx)] if ptx else None


def find(source: KernelSource, cuda_major: int, cc: tuple[int, int] | None = None) -> Path | None:
    """An existing compiled module of ``source`` for a GPU of compute capability ``cc``
    (shipped folder first, then the cache; :func:`pick` within each), or None."""
    stem = key(source, cuda_major)
    for folder in (shipped_dir(), cache_dir()):
        if folder is not None and folder.is_dir():
            hit = pick(sorted(folder.glob(glob.escape(stem) + "*")), stem, cc)
            if hit is not None:
                return hit
    return None


def _write_atomic(out: Path, data: bytes) -> None:
    # Written beside the target and renamed, so a concurrent start never loads half a file.
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=out.suffix, dir=out.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    # mkstemp makes it 0600; readable by all (an image's kernels are built by root and
    # loaded by the service's own user).
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)


def source_text(source: KernelSource) -> str:
    """The text NVRTC compiles for ``source``: its .cu, led by the sources digest (CuPy keys
    its NVRTC cache on text and options only, so a header edit must change the text)."""
    return f"// zapverify kernel sources {_sources_of(source)}\n" + source.path.read_text()


def nvrtc_options(source: KernelSource) -> tuple[str, ...]:
    """NVRTC options for ``source``: :data:`NVRTC_OPTIONS`, its include folders and its
    variant's own options (``-D...``, ``--maxrregcount=N``: NVRTC and nvcc spell them alike)."""
    dirs = dict.fromkeys([str(source.directory), str(KERNEL_DIR)])
    return (*NVRTC_OPTIONS, *(f"--include-path={d}" for d in dirs), *source.options)


def build_nvrtc(source: KernelSource, target: str, *, out_dir: Path | None = None) -> Path:
    """Compile ``source`` with NVRTC (no nvcc, no host compiler, no GPU) for one of
    :func:`targets` into ``out_dir`` (default :func:`cache_dir`); return the file.

    A target already built is kept.  Raises :class:`app.engine.device.nvrtc.NvrtcError`
    when no libnvrtc loads or it rejects the source.
    """
    path = (out_dir or cache_dir()) / target_file(key(source, nvrtc.version()[0]), target)
    if not path.is_file():
        _write_atomic(path, nvrtc.compile_program(source_text(source), source.path.name, nvrtc_options(source),
                                                  target))
    return path


def build(source: KernelSource, *, compiler: str | None = None, archs: tuple[str, ...] = ARCHS,
          out_dir: Path | None = None, timeout: float | None = None) -> Path:
    """Compile ``source`` with nvcc into ``<out_dir or cache_dir()>/``:func:`fatbin_file`; return it.

    Returns the existing file without running nvcc when it is already there.  Raises
    :class:`NvccError` when no nvcc is found, it fails or it runs past ``timeout`` seconds.
    """
    compiler = compiler or nvcc()
    if compiler is None:
        raise NvccError("no nvcc on the PATH (set NVCC)")
    out = (out_dir or cache_dir()) / fatbin_file(key(source, nvcc_major(compiler)), archs)
    if out.is_file():
        return out
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    gencode.append(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}")
    includes = [f"-I{d}" for d in dict.fromkeys([source.directory, KERNEL_DIR])]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            proc = subprocess.run([compiler, "--fatbin", *NVRTC_OPTIONS, *source.options, *includes, *gencode,
                                   "-o", f"{tmp}/out", str(source.path)], capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise NvccError(f"nvcc ran past {timeout:.0f} s on {source.name}.cu") from exc
        if proc.returncode != 0:
            raise NvccError(f"nvcc failed on {source.name}.cu:\n{proc.stderr[-4000:]}")
        _write_atomic(out, Path(f"{tmp}/out").read_bytes())
    return out


def build_all(out_dir: Path, *, compiler: str | None = None, archs: tuple[str, ...] = ARCHS, jobs: int = 0,
              log: Callable[[str], None] = print) -> None:
    """Compile every source the service loads (:func:`registry.service_sources`) into
    ``out_dir``: a fatbin each with nvcc when ``compiler`` is given, else every NVRTC
    target each.  ``jobs`` compiles run at once (default: the cores; each is single-threaded
    and runs outside the GIL); ``log`` gets a line per file.  Raises :class:`NvccError` or
    :class:`app.engine.device.nvrtc.NvrtcError` on a failed compile.

    Needs only the standard library and libnvrtc (or nvcc): the CUDA image's kernel stage
    runs it with nothing else installed.
    """
    if compiler is not None:
        work: list[tuple[KernelSource, str | None]] = [(s, None) for s in registry.service_sources()]
    else:  # a job per target, the largest sources first, so the long compiles overlap
        work = [(s, t) for s in sorted(registry.service_sources(), key=lambda s: -s.path.stat().st_size)
                for t in targets(archs)]

    def one(job: tuple[KernelSource, str | None]) -> str:
        source, target = job
        t0 = time.perf_counter()
        built = (build(source, compiler=compiler, archs=archs, out_dir=out_dir) if target is None
                 else build_nvrtc(source, target, out_dir=out_dir))
        return f"{source.path.name} -> {built.name} ({time.perf_counter() - t0:.1f} s)"

    with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        for done in as_completed([pool.submit(one, job) for job in work]):
            log(done.result())  # as each file is written


def load_module(cp: Any, source: KernelSource, cc: tuple[int, int] | None = None, *,
                compile: bool = True) -> tuple[Any, str]:
    """A ``cupy.RawModule`` of ``source`` for a GPU of compute capability ``cc``, and where
    it came from: ``"prebuilt:<file>"`` (the shipped folder), ``"cache:<file>"`` (built
    earlier on this host), ``"nvcc:<file>"`` (built now), ``"nvrtc"`` (CuPy's NVRTC, with
    a persistent cache); see the module doc for the order.

    ``cp`` is the CuPy module (tests pass a stand-in).  A failing nvcc (an error, or past
    :data:`NVCC_TIMEOUT`) falls back to NVRTC, which is told why in the origin
    (``"nvrtc (nvcc failed: ...)"``).  Raises :class:`KernelBuildError` when ``compile`` is
    False and no compiled module matches, and what CuPy raises for a bad module.
    """
    major = int(cp.cuda.runtime.runtimeGetVersion()) // 1000
    path = find(source, major, cc=cc)
    if path is not None:
        shipped = shipped_dir()
        kind = "prebuilt" if shipped is not None and path.parent == shipped else "cache"
        return cp.RawModule(path=str(path)), f"{kind}:{path.name}"
    if not compile:
        raise KernelBuildError(f"no compiled module of {source.name}.cu for CUDA {major}, compute capability "
                               f"{cc}, and compiling was refused (key {key(source, major)})", field=source.name)
    origin = "nvrtc"
    compiler = nvcc()
    if compiler is not None and nvcc_major(compiler) == major:
        try:
            built = build(source, compiler=compiler, timeout=NVCC_TIMEOUT)
            return cp.RawModule(path=str(built)), f"nvcc:{built.name}"
        except NvccError as exc:  # NVRTC may still build it; say why it was needed
            origin = f"nvrtc (nvcc failed: {str(exc).splitlines()[0][:200]})"
    # NVRTC: CuPy keeps what it compiled in $CUPY_CACHE_DIR; keep it beside our fatbins so
    # it survives like them (CuPy reads the variable when it compiles).
    os.environ.setdefault("CUPY_CACHE_DIR", str(cache_dir().parent / "nvrtc"))
    return cp.RawModule(code=source_text(source), options=nvrtc_options(source)), origin
