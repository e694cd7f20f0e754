"""What the CPU backend's native libraries share (``native_loops.cpp`` of
:mod:`app.engine.backends.native`, ``ed25519_cpu.cpp`` of :mod:`app.engine.backends.ed25519_cpu`,
``native_ml_dsa.cpp`` of :mod:`app.engine.backends.native_ml_dsa`, ``native_bls.cpp`` of
:mod:`app.engine.backends.native_bls`): where a prebuilt copy lies, how a library is built or
found, a chunk's columns as C arguments, and the libcrypto hashlib runs on.

A library is built by the kernels' host build (:mod:`app.engine.device.hostbuild`, cached by
source hash); a host without a C++ compiler finds it prebuilt (``native.prebuild``) under
``$ZAPVERIFY_NATIVE_DIR``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def digest(source: Path, extra: Sequence[Path] = ()) -> str:
    """16 hex digits of the SHA-256 of ``source`` and the ``extra`` files it includes."""
    return hashlib.sha256(b"\0".join(p.read_bytes() for p in (source, *extra))).hexdigest()[:16]


def prebuilt_path(directory: str | Path, source: Path, extra: Sequence[Path] = ()) -> Path:
    """Where a library prebuilt from this exact ``source`` (and ``extra``) lies in ``directory``:
    ``<stem>-<digest>.so``."""
    return Path(directory) / f"{source.stem}-{digest(source, extra)}.so"


def build(source: Path, extra: Sequence[Path] = (), include_dirs: Sequence[Path] = (),
          defines: Sequence[str] = ()) -> Path:
    """Compile ``source`` with the host build (cached).  The host build's cache key hashes the
    source text and the kernel folder, so files of ``extra`` (included from beside ``source``)
    enter it as a define of their digest.  Raises :class:`app.core.errors.KernelBuildError`."""
    from app.engine.device import hostbuild

    tag = [f"ZV_SOURCES_DIGEST={digest(source, extra)}"] if extra else []
    return hostbuild.build_code(source.read_text(), source.stem, include_dirs, [*tag, *defines])


def library(source: Path, extra: Sequence[Path] = (), include_dirs: Sequence[Path] = ()) -> Path:
    """The built library of ``source``: the kernels' host build (:func:`build`), or, where there
    is no compiler, a copy prebuilt from these sources under ``$ZAPVERIFY_NATIVE_DIR``
    (:func:`prebuilt_path`).  Raises :class:`app.core.errors.KernelBuildError` where neither is
    to be had."""
    from app.engine.device import hostbuild

    if hostbuild.compiler() is None:
        prebuilt = prebuilt_path(os.environ.get("ZAPVERIFY_NATIVE_DIR", "."), source, extra)
        if prebuilt.is_file():
            return prebuilt
    return build(source, extra, include_dirs)


def columns(pks: np.ndarray, sigs: np.ndarray, msgs: np.ndarray, offsets: np.ndarray) -> tuple[int, tuple, tuple]:
    """``(n, arrays to keep alive, ctypes arguments)`` of a chunk's columns, C-contiguous:
    keys, key length, signatures, signature length, messages, their length, offsets, n.
    Raises ``ValueError`` when there are fewer keys or signatures than offsets say."""
    pks = np.ascontiguousarray(pks, dtype=np.uint8)
    sigs = np.ascontiguousarray(sigs, dtype=np.uint8)
    msgs = np.ascontiguousarray(msgs, dtype=np.uint8)
    off = np.ascontiguousarray(offsets, dtype=np.uint64)
    n = len(off) - 1
    if pks.shape[0] < n or sigs.shape[0] < n:
        raise ValueError(f"{n} offsets' items but {pks.shape[0]} keys, {sigs.shape[0]} signatures")
    return n, (pks, sigs, msgs, off), (pks.ctypes.data, pks.shape[1], sigs.ctypes.data, sigs.shape[1],
                                       msgs.ctypes.data, msgs.shape[0], off.ctypes.data, n)


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
