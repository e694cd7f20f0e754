"""NVRTC through its C API (ctypes): kernel text to SASS (cubin) or PTX without a GPU or a host compiler.

``zapverify build-kernels`` uses it where nvcc is absent (the CUDA image: NVIDIA's NVRTC
wheel, no toolkit, no g++), so the image ships compiled kernels (docs/kernels.md,
"Compiled kernels").  CuPy's own NVRTC wrapper is not used here because the build needs no
CuPy and no driver; only ``libnvrtc`` is loaded.

The library is looked for in ``$ZAPVERIFY_NVRTC`` (a path), then in NVIDIA's pip wheels
(``site-packages/nvidia/cu*/lib``, ``nvidia/cuda_nvrtc/lib``), then by the dynamic loader.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from functools import cache
from pathlib import Path

from app.core.errors import KernelBuildError


class NvrtcError(KernelBuildError):
    """NVRTC is missing or rejected a kernel (the message holds its log)."""


def _candidates() -> list[str]:
    found = []
    if os.environ.get("ZAPVERIFY_NVRTC"):
        found.append(os.environ["ZAPVERIFY_NVRTC"])
    for entry in sys.path:
        base = Path(entry) / "nvidia"
        if base.is_dir():
            # newest CUDA major first (cu13 before cu12); the builtins library is not the API
            libs = [p for p in base.glob("*/lib/libnvrtc.so*") if "builtins" not in p.name]
            found.extend(str(p) for p in sorted(libs, reverse=True))
    name = ctypes.util.find_library("nvrtc")
    if name:
        found.append(name)
    return found


@cache
def library() -> ctypes.CDLL:
    """The loaded ``libnvrtc``.  Raises :class:`NvrtcError` when none loads."""
    tried = []
    for cand in _candidates():
        try:
            lib = ctypes.CDLL(cand)
        except OSError as exc:
            tried.append(f"{cand}: {exc}")
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        return lib
    raise NvrtcError("no libnvrtc found (install NVIDIA's nvidia-cuda-nvrtc wheel or set ZAPVERIFY_NVRTC); "
                     f"tried: {tried or 'nothing'}")


def available() -> bool:
    """Whether a ``libnvrtc`` loads."""
    try:
        library()
    except NvrtcError:
        return False
    return True


def _check(lib: ctypes.CDLL, result: int, what: str) -> None:
    if result != 0:
        raise NvrtcError(f"{what}: {lib.nvrtcGetErrorString(result).decode()}")


def version() -> tuple[int, int]:
    """NVRTC's CUDA version, ``(major, minor)``."""
    lib = library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def compile_program(code: str, name: str, options: tuple[str, ...], target: str) -> bytes:
    """Compile CUDA C++ ``code`` for one ``target``: ``"sm_90"`` gives a cubin (SASS, ELF),
    ``"compute_90"`` gives PTX text (as bytes, without the trailing NUL).

    ``options`` are NVRTC options (``-std=c++17``, ``--include-path=…``); the target's
    ``-arch`` is added here.  Raises :class:`NvrtcError` with NVRTC's log on a failure.
    """
    lib = library()
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), name.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in (*options, f"-arch={target}")]
        argv = (ctypes.c_char_p * len(opts))(*opts)
        result = lib.nvrtcCompileProgram(prog, len(opts), argv)
        if result != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise NvrtcError(f"NVRTC failed on {name} for {target}: "
                             f"{lib.nvrtcGetErrorString(result).decode()}\n{log.value.decode(errors='replace')[-4000:]}")
        kind = "CUBIN" if target.startswith("sm_") else "PTX"
        size = ctypes.c_size_t()
        _check(lib, getattr(lib, f"nvrtcGet{kind}Size")(prog, ctypes.byref(size)), f"nvrtcGet{kind}Size")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, getattr(lib, f"nvrtcGet{kind}")(prog, buf), f"nvrtcGet{kind}")
        return buf.raw.rstrip(b"\0") if kind == "PTX" else buf.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
