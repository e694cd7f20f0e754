"""The CPU backend's own ML-DSA-44/65/87 verify (``native_ml_dsa.cpp``): FIPS 204 Alg. 3
ML-DSA.Verify (pure interface) with the verdicts of OpenSSL, the reference
(:func:`app.engine.reference.reference.make_verify_mldsa`), vectorized for x86-64.

:func:`load` builds ``native_ml_dsa.cpp`` (and the vector code it includes twice,
``native_ml_dsa_simd.inc``) with the kernels' host build (:mod:`app.engine.device.hostbuild`,
cached by source hash; ``ml_dsa.cuh``'s checks and decoding are compiled in from the kernel
folder) or finds it prebuilt (:func:`prebuild`).  One ctypes call verifies a whole chunk with
the GIL released, so the CPU backend runs ML-DSA chunks on its thread pool, each on one core,
beside the native loops of :mod:`app.engine.backends.native`, which hash the leaves.

Code paths (:data:`ISA_NAMES`), chosen at run time by what the CPU has: AVX-512 (8-lane
Keccak with vprolq/vpternlogq, 8-lane NTT), AVX2 (4-lane Keccak, 8-lane NTT) or the portable
scalar path, which is the kernels' own zv_mldsa_verify.  Tests run every path this CPU has.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import numpy as np

from app.engine.backends import native_build

SOURCE = Path(__file__).with_name("native_ml_dsa.cpp")
#: The vector code SOURCE includes once per instruction set.
SIMD_SOURCE = Path(__file__).with_name("native_ml_dsa_simd.inc")
#: What :func:`native_build.library` takes beside SOURCE: the included file, and its folder.
EXTRA = (SIMD_SOURCE,)
INCLUDE_DIRS = (SOURCE.parent,)
#: ``isa`` values of :meth:`MlDsaVerifier.verdicts`: 0 portable, 1 AVX2, 2 AVX-512 (F, VL, BW).
ISA_NAMES = {0: "portable", 1: "avx2", 2: "avx512"}
#: The parameter sets, by scheme id.
LEVELS = {"ml-dsa-44": 44, "ml-dsa-65": 65, "ml-dsa-87": 87}

_P = ctypes.c_void_p
_SZ = ctypes.c_size_t
_INT = ctypes.c_int


def build(defines: tuple[str, ...] = ()) -> Path:
    """Compile the library (cached; :func:`native_build.build`); ``defines`` as
    :func:`hostbuild.build_code` takes them (``"ZV_MLDSA_PORTABLE"`` compiles the vector code
    out).  Raises :class:`app.engine.device.hostbuild.HostBuildError` without a compiler or on
    a failed build."""
    return native_build.build(SOURCE, EXTRA, INCLUDE_DIRS, defines)


def library() -> Path:
    """The library to load: built here (cached), or where there is no compiler, the one
    prebuilt from these sources under ``$ZAPVERIFY_NATIVE_DIR`` (:func:`native_build.library`)."""
    return native_build.library(SOURCE, EXTRA, INCLUDE_DIRS)


class MlDsaVerifier:
    """The loaded library.  :meth:`verdicts` never raises for bad items (a bad length,
    context, key or signature is a ``0`` verdict)."""

    def __init__(self, lib: ctypes.CDLL):
        lib.zv_cpu_ml_dsa.argtypes = [_INT, _INT, _P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P]
        lib.zv_cpu_ml_dsa.restype = None
        lib.zv_mldsa_cpu_best_isa.restype = _INT
        lib.zv_mldsa_cpu_check_use_hint.argtypes = [_INT, _INT]
        lib.zv_mldsa_cpu_check_use_hint.restype = ctypes.c_long
        self.lib = lib
        #: The fastest path this CPU runs (a key of :data:`ISA_NAMES`).
        self.best_isa: int = lib.zv_mldsa_cpu_best_isa()

    def verdicts(self, level: int, pks: np.ndarray, sigs: np.ndarray, msgs: np.ndarray, offsets: np.ndarray,
                 ctx: bytes = b"", isa: int = -1) -> np.ndarray:
        """FIPS 204 ML-DSA.Verify of each item under the batch's context ``ctx``.

        Args:
            level: the parameter set, 44, 65 or 87 (:data:`LEVELS`; another: every verdict 0).
            pks: ``uint8[n, pk_len]``; sigs: ``uint8[n, sig_len]`` (lengths other than the
                set's, FIPS 204 Table 2: every verdict 0); msgs: ``uint8[M]``;
                offsets: ``[n + 1]`` message offsets relative to ``msgs``, C-contiguous
                ``uint64`` (as native_build.columns makes them).
            ctx: the context string (more than 255 bytes: every verdict 0).
            isa: the code path (:data:`ISA_NAMES`); -1 or more than the CPU has: the best.
        Returns:
            ``uint8[n]`` verdicts, 1 valid, 0 invalid.
        """
        n = len(offsets) - 1
        out = np.zeros(n, dtype=np.uint8)
        c = np.frombuffer(bytes(ctx) + b"\0", dtype=np.uint8)  # never empty: ctypes needs an address
        self.lib.zv_cpu_ml_dsa(level, isa, pks.ctypes.data, pks.shape[1], sigs.ctypes.data, sigs.shape[1],
                               msgs.ctypes.data, msgs.shape[0], offsets.ctypes.data, n, c.ctypes.data, len(ctx),
                               out.ctypes.data)
        return out


_lock = threading.Lock()
_verifier: MlDsaVerifier | None = None


def load() -> MlDsaVerifier:
    """The library, built (or found prebuilt under ``$ZAPVERIFY_NATIVE_DIR`` where there is
    no compiler) and loaded once per process.  Raises
    :class:`app.core.errors.KernelBuildError` or ``OSError`` where neither works."""
    global _verifier
    with _lock:
        if _verifier is None:
            _verifier = MlDsaVerifier(ctypes.CDLL(str(library())))
        return _verifier
