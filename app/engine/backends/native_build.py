"""What the CPU backend's native libraries share (``native_loops.cpp`` of
:mod:`app.engine.backends.native`, ``native_bls.cpp`` of :mod:`app.engine.backends.native_bls`):
where a prebuilt copy lies, how a library is built or found, and a chunk's columns as C
arguments.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np


def prebuilt_path(directory: str | Path, source: Path) -> Path:
    """Where a library prebuilt from this exact ``source`` lies in ``directory``:
    ``<stem>-<16 hex digits of the source's SHA-256>.so``."""
    return Path(directory) / f"{source.stem}-{hashlib.sha256(source.read_bytes()).hexdigest()[:16]}.so"


def library(source: Path) -> Path:
    """The built library of ``source``: the kernels' host build (cached by source hash), or,
    where there is no compiler, a copy prebuilt from this source under
    ``$ZAPVERIFY_NATIVE_DIR`` (:func:`prebuilt_path`).  Raises
    :class:`app.core.errors.KernelBuildError` where neither is to be had."""
    from app.engine.device import hostbuild

    if hostbuild.compiler() is None:
        prebuilt = prebuilt_path(os.environ.get("ZAPVERIFY_NATIVE_DIR", "."), source)
        if prebuilt.is_file():
            return prebuilt
    return hostbuild.build_code(source.read_text(), source.stem)


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
