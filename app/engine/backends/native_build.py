"""Building and finding the CPU backend's C++ libraries (``native_loops.cpp``,
``ed25519_cpu.cpp``) and reaching the libcrypto hashlib runs on, for
:mod:`app.engine.backends.native` and :mod:`app.engine.backends.ed25519_cpu` alike.

A library is built by the kernels' host build (:mod:`app.engine.device.hostbuild`, cached by
source hash); a host without a C++ compiler finds it prebuilt (``native.prebuild``) under
``$ZAPVERIFY_NATIVE_DIR``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from pathlib import Path


def prebuilt_path(directory: str | Path, source: Path) -> Path:
    """Where a library prebuilt from this exact ``source`` lies in ``directory``."""
    return Path(directory) / f"{source.stem}-{hashlib.sha256(source.read_bytes()).hexdigest()[:16]}.so"


def library(source: Path) -> Path:
    """The built library of ``source``: compiled here (cached by hash), or where no compiler
    is, prebuilt under ``$ZAPVERIFY_NATIVE_DIR`` when there.  Raises
    :class:`app.core.errors.KernelBuildError` when neither works."""
    from app.engine.device import hostbuild

    if hostbuild.compiler() is None:
        # No compiler here: a library prebuilt from this source, under $ZAPVERIFY_NATIVE_DIR.
        prebuilt = prebuilt_path(os.environ.get("ZAPVERIFY_NATIVE_DIR", "."), source)
        if prebuilt.is_file():
            return prebuilt
    return hostbuild.build_code(source.read_text(), source.stem)


def libcrypto(names: tuple[str, ...]) -> ctypes.CDLL | None:
    """The libcrypto Python's hashlib runs on, as a library handle exporting ``names``, or None
    where there is none to reach (no ``_hashlib``, a libcrypto linked in statically).

    Symbols are looked up through ``_hashlib``'s own handle, which searches the libraries it
    depends on: its libcrypto, not another copy some other package loaded (psycopg bundles one).
    """
    try:
        import _hashlib

        so = ctypes.CDLL(_hashlib.__file__)
    except (ImportError, OSError, AttributeError):  # AttributeError: a built-in _hashlib, no file
        return None
    return so if all(hasattr(so, name) for name in names) else None
