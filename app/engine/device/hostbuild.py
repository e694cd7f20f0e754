"""Host build of the kernel sources: the same .cu files the GPU runs, compiled by g++.

``load("hash")`` compiles ``app/engine/kernels/hashes/hash.cu`` (and whatever headers it
includes) into a shared library with the system C++ compiler and loads it with ctypes.
The library is cached under ``$ZAPVERIFY_KERNEL_CACHE`` (default ``~/.cache/zapverify/kernels``)
by a hash of the source text, of every source in the include folders and of the compiler
command, so it is rebuilt exactly when a source changes.  Kernels then run with one host
"thread", a block kernel with one fiber per thread of its block (zv_port.cuh ZV_BLOCK_RUN;
docs/kernels.md, "How the host build runs a block").

``load_code`` builds source *text* the same way; tests use it to stand the host build in
for NVRTC, which is also given text.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from app.core.errors import KernelBuildError

#: The kernel sources (docs/kernels.md "Layout and names"): zv_port.cuh at the top, the rest in
#: fields/, curves/, hashes/, tables/ and schemes/.  Every build searches it for quoted
#: includes, which name a header by its path from here ("fields/mont.cuh").
KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"
#: The host-only headers of zv_port.cuh's block emulation (fibers: makecontext, _setjmp,
#: malloc) are included here, so no kernel source names a system header (NVRTC has none).
#: -U_FORTIFY_SOURCE: where the compiler fortifies by default (Ubuntu's gcc), glibc's checked
#: _longjmp refuses a jump to another stack ("longjmp causes uninitialized stack frame"),
#: and switching stacks is what the fibers do.
#: Every host build of kernel sources needs them (scripts/gpu_model's census builds too).
HOST_HEADERS = ["-U_FORTIFY_SOURCE", "-include", "ucontext.h", "-include", "setjmp.h", "-include", "stdlib.h"]
CXXFLAGS = ["-x", "c++", "-std=c++17", "-O2", "-shared", "-fPIC", "-fno-strict-aliasing",
            "-Wall", "-Wno-unused-function", *HOST_HEADERS]

_lock = threading.Lock()
_loaded: dict[Path, ctypes.CDLL] = {}


class HostBuildError(KernelBuildError):
    """The C++ compiler is missing or rejected a kernel source (the message holds its output)."""


def compiler() -> str | None:
    """The C++ compiler used for host builds (``$CXX``, else g++, else c++), or None."""
    for cand in (os.environ.get("CXX"), "g++", "c++"):
        if cand and shutil.which(cand):
            return cand
    return None


def verify_checks() -> bool:
    """Whether host builds compile the kernels' ZV_CHECK bounds checks (``-DZV_VERIFY``):
    on when ``$ZAPVERIFY_KERNEL_VERIFY`` is ``1``, as the test suite sets it."""
    return os.environ.get("ZAPVERIFY_KERNEL_VERIFY") == "1"


def verify_failures(lib: ctypes.CDLL) -> int | None:
    """How many ZV_CHECK bounds checks failed in ``lib`` so far (None: built without checks)."""
    try:
        return ctypes.c_uint64.in_dll(lib, "zv_verify_failures").value
    except ValueError:
        return None


def _cache_dir() -> Path:
    return Path(os.environ.get("ZAPVERIFY_KERNEL_CACHE", Path.home() / ".cache" / "zapverify" / "kernels"))


def sources_digest(*dirs: Path) -> str:
    """SHA-256 over every kernel source (.cu and .cuh) in ``dirs`` and their subfolders
    (default: :data:`KERNEL_DIR`), each one's path from its folder included."""
    h = hashlib.sha256()
    for d in dirs or (KERNEL_DIR,):
        d = Path(d)
        for p in sorted(d.rglob("*.cu*")):
            h.update(p.relative_to(d).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def find_source(name: str) -> Path:
    """The one compilation unit ``<name>.cu`` under :data:`KERNEL_DIR` (any kind folder).

    Raises :class:`HostBuildError` when there is none (or, which the layout forbids, more
    than one)."""
    found = sorted(KERNEL_DIR.rglob(f"{name}.cu"))
    if len(found) != 1:
        raise HostBuildError(f"expected one kernel source {name}.cu under {KERNEL_DIR}, found {len(found)}")
    return found[0]


def _include_dirs(extra: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for d in [*extra, KERNEL_DIR]:
        d = Path(d).resolve()
        if d not in out:
            out.append(d)
    return out


def build_code(code: str, name: str, include_dirs: Sequence[Path] = (), defines: Sequence[str] = ()) -> Path:
    """Compile kernel source text into a cached shared library and return its path.

    ``include_dirs`` are searched for quoted includes before this folder; ``defines`` are
    extra macros (``"ZV_COUNT_OPS"`` turns on the operation counts of zv_port.cuh).  Raises
    :class:`HostBuildError` when no compiler is found or compilation fails.
    """
    cxx = compiler()
    if cxx is None:
        raise HostBuildError("no C++ compiler (set CXX or install g++)")
    dirs = _include_dirs(include_dirs)
    cmd = [cxx, *CXXFLAGS, *(["-DZV_VERIFY"] if verify_checks() else []), *(f"-D{d}" for d in defines),
           *(f"-I{d}" for d in dirs)]
    key = hashlib.sha256("\0".join([code, sources_digest(*dirs), *cmd]).encode()).hexdigest()[:20]
    out = _cache_dir() / f"{name}-{key}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".cu")
    src.write_text(code)
    # Build beside the target and rename, so concurrent builders never load a half-written file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    proc = subprocess.run([*cmd, "-o", tmp, str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp)
        raise HostBuildError(f"{cxx} failed on {name}.cu:\n{proc.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


def build(name: str, source_dir: Path | None = None) -> Path:
    """Compile ``<source_dir>/<name>.cu`` (default: the one ``<name>.cu`` under
    :data:`KERNEL_DIR`, :func:`find_source`) into a cached shared library.

    Raises :class:`HostBuildError` when the source is missing, no compiler is found or
    compilation fails.
    """
    src = Path(source_dir) / f"{name}.cu" if source_dir is not None else find_source(name)
    if not src.is_file():
        raise HostBuildError(f"no kernel source {src}")
    return build_code(src.read_text(), name, [src.parent])


def _open(path: Path) -> ctypes.CDLL:
    with _lock:
        lib = _loaded.get(path)
        if lib is None:
            lib = _loaded[path] = ctypes.CDLL(str(path))
        return lib


def load(name: str, source_dir: Path | None = None) -> ctypes.CDLL:
    """Build (if needed) and load ``<name>.cu``; one CDLL per built library per process."""
    return _open(build(name, source_dir))


def load_code(code: str, name: str, include_dirs: Sequence[Path] = (), defines: Sequence[str] = ()) -> ctypes.CDLL:
    """Build (if needed) and load kernel source text (see :func:`build_code`)."""
    return _open(build_code(code, name, include_dirs, defines))


def op_counts(lib: ctypes.CDLL) -> tuple[list[int], list[int]] | None:
    """The ZV_COUNT operation counts of ``lib`` in zv_port.cuh's ZV_OP_ order: (run by
    every thread, run by one lane of a warp under ZV_SERIAL); None when built
    without ``ZV_COUNT_OPS``."""
    k = len(op_names())
    try:
        arr = (ctypes.c_uint64 * (2 * k)).in_dll(lib, "zv_op_counts")
    except ValueError:
        return None
    vals = [int(v) for v in arr]
    return vals[:k], vals[k:]


def op_names() -> list[str]:
    """The ZV_OP_ names of zv_port.cuh's operation-count list, in order (ZV_OP_COUNT excluded)."""
    text = (KERNEL_DIR / "zv_port.cuh").read_text()
    body = text[text.index("enum {", text.index("ZV_COUNT(ZV_OP_")):]
    body = body[:body.index("}")]
    return [n for n in re.findall(r"\b(ZV_OP_[A-Z0-9_]+)\b", body) if n != "ZV_OP_COUNT"]
