"""The CPU backend's own Ed25519 verify (``ed25519_cpu.cpp``): libsodium's verdicts
(RFC 8032 §5.1.7 under crypto_sign_ed25519_verify_detached's rules), faster per core.

:func:`load` builds the source with the kernels' host build (:mod:`app.engine.device.hostbuild`,
cached by source hash; ``-DZV_VERIFY`` bounds checks where ``$ZAPVERIFY_KERNEL_VERIFY=1``) and
hands it OpenSSL's SHA-512 from the libcrypto hashlib runs on where there is one (else the
kernels' portable SHA-512 stays).  :class:`Ed25519Cpu` verifies one chunk per call with the GIL
released, as the native loops of :mod:`app.engine.backends.native` do.  libsodium stays the
reference that defines verdicts (``scripts/agreement --scheme ed25519-cpu`` and
tests/test_ed25519_cpu.py compare the two).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path

import numpy as np

from app.core.errors import KernelBuildError

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("ed25519_cpu.cpp")
#: OpenSSL's low-level SHA-512 (openssl/sha.h), in the order zv_ed25519_cpu_use_openssl_sha512 takes them.
OPENSSL_SHA512 = ("SHA512_Init", "SHA512_Update", "SHA512_Final")
#: ``$ZAPVERIFY_ED25519_CPU=0`` keeps the CPU backend on libsodium's verify (for comparisons).
ENV_SWITCH = "ZAPVERIFY_ED25519_CPU"

_P = ctypes.c_void_p
_SZ = ctypes.c_size_t


class Ed25519Cpu:
    """The built library.  :attr:`sha512` says which SHA-512 it hashes with (``"openssl"``
    or ``"portable"``); :attr:`verify_address` is the address of a one-item verify with
    libsodium's signature and return convention (0 valid, -1 invalid)."""

    def __init__(self, lib: ctypes.CDLL, libcrypto: ctypes.CDLL | None):
        lib.zv_ed25519_cpu_verify_chunk.argtypes = [_P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P]
        lib.zv_ed25519_cpu_verify_chunk.restype = None
        lib.zv_ed25519_cpu_use_openssl_sha512.argtypes = [_P, _P, _P]
        lib.zv_ed25519_cpu_verify.argtypes = [_P, _P, ctypes.c_ulonglong, _P]
        self.sha512 = "portable"
        if libcrypto is not None and lib.zv_ed25519_cpu_use_openssl_sha512(
                *(ctypes.cast(getattr(libcrypto, n), _P).value for n in OPENSSL_SHA512)):
            self.sha512 = "openssl"
        self.verify_address = ctypes.cast(lib.zv_ed25519_cpu_verify, _P).value
        self._lib = lib

    def verify_columns(self, cols: tuple) -> np.ndarray:
        """Verdicts (``uint8[n]``, 1 valid) of a chunk given as the ctypes column arguments of
        :func:`app.engine.backends.native._columns`: keys, key length, signatures, signature
        length, messages, their length, ``uint64[n + 1]`` offsets, n."""
        verdicts = np.zeros(cols[-1], dtype=np.uint8)
        self._lib.zv_ed25519_cpu_verify_chunk(*cols, verdicts.ctypes.data)
        return verdicts

    def verify(self, public_key: bytes, message: bytes, signature: bytes) -> bool:
        """One item: True when valid (any length accepted; a wrong one is False)."""
        pks = np.frombuffer(public_key, dtype=np.uint8).reshape(1, -1)
        sigs = np.frombuffer(signature, dtype=np.uint8).reshape(1, -1)
        msgs = np.frombuffer(message or b"\0", dtype=np.uint8)
        off = np.array([0, len(message)], dtype=np.uint64)
        cols = (pks.ctypes.data, len(public_key), sigs.ctypes.data, len(signature), msgs.ctypes.data,
                len(message), off.ctypes.data, 1)
        if not public_key or not signature:
            return False
        return bool(self.verify_columns(cols)[0])

    def bound_failures(self) -> int | None:
        """ZV_CHECK bounds-check failures so far (None: built without ``-DZV_VERIFY``)."""
        from app.engine.device import hostbuild

        return hostbuild.verify_failures(self._lib)


def build() -> Path:
    """The built library's path (cached by source hash; prebuilt where no compiler is, as
    :func:`app.engine.backends.native.library`).  Raises
    :class:`app.core.errors.KernelBuildError` when neither works."""
    from app.engine.backends import native

    return native.library(SOURCE)


def libcrypto() -> ctypes.CDLL | None:
    """The libcrypto hashlib runs on, through ``_hashlib``'s own handle (see
    :func:`app.engine.backends.native._libcrypto`), where it exports OpenSSL's SHA-512."""
    from app.engine.backends import native

    return native._libcrypto(OPENSSL_SHA512)


_lock = threading.Lock()
_loaded: Ed25519Cpu | None = None
_failed = False


def enabled() -> bool:
    """Whether the CPU backend uses this verify (``$ZAPVERIFY_ED25519_CPU`` not ``0``)."""
    return os.environ.get(ENV_SWITCH, "1") != "0"


def load() -> Ed25519Cpu | None:
    """The library, built and loaded once per process; None where it does not build."""
    global _loaded, _failed
    with _lock:
        if _loaded is None and not _failed:
            try:
                _loaded = Ed25519Cpu(ctypes.CDLL(str(build())), libcrypto())
            except (KernelBuildError, OSError, AttributeError) as exc:
                log.warning("own Ed25519 CPU verify unavailable, using libsodium's: %s", exc)
                _failed = True
        return _loaded
