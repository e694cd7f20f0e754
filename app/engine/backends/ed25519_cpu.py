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
from app.engine.backends import native_build

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("ed25519_cpu.cpp")
#: OpenSSL's low-level SHA-512 (openssl/sha.h), in the order zv_ed25519_cpu_use_openssl_sha512 takes them.
OPENSSL_SHA512 = ("SHA512_Init", "SHA512_Update", "SHA512_Final")
#: ``$ZAPVERIFY_ED25519_CPU=0`` keeps the CPU backend on libsodium's verify (for comparisons).
ENV_SWITCH = "ZAPVERIFY_ED25519_CPU"
#: The builds, by name: the defines each is compiled with.  ``ed25519-cpu`` (the one the
#: backend loads) picks its code path at run time by the CPU's features; ``ed25519-cpu-portable``
#: has the portable path only (what a CPU without the vector features runs).
VARIANTS: dict[str, tuple[str, ...]] = {"ed25519-cpu": (), "ed25519-cpu-portable": ("ZV_CPU_PORTABLE",)}
DEFAULT = "ed25519-cpu"

_P = ctypes.c_void_p
_SZ = ctypes.c_size_t


class Ed25519Cpu:
    """The built library.  :attr:`sha512` says which SHA-512 it hashes with (``"openssl"``
    or ``"portable"``); :attr:`verify_address` is the address of a one-item verify with
    libsodium's signature and return convention (0 valid, -1 invalid)."""

    def __init__(self, lib: ctypes.CDLL, libcrypto: ctypes.CDLL | None):
        #: The loaded library (its ZV_CHECK counter: :func:`app.engine.device.hostbuild.verify_failures`).
        self.library = lib
        lib.zv_ed25519_cpu_verify_chunk.argtypes = [_P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P]
        lib.zv_ed25519_cpu_verify_chunk.restype = None
        lib.zv_ed25519_cpu_use_openssl_sha512.argtypes = [_P, _P, _P]
        lib.zv_ed25519_cpu_verify.argtypes = [_P, _P, ctypes.c_ulonglong, _P]
        lib.zv_ed25519_cpu_verify_each.argtypes = [_P, _P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P]
        lib.zv_ed25519_cpu_verify_each.restype = None
        self.sha512 = "portable"
        if libcrypto is not None and lib.zv_ed25519_cpu_use_openssl_sha512(
                *(ctypes.cast(getattr(libcrypto, n), _P).value for n in OPENSSL_SHA512)):
            self.sha512 = "openssl"
        self.verify_address = ctypes.cast(lib.zv_ed25519_cpu_verify, _P).value
        lib.zv_ed25519_cpu_path.restype = ctypes.c_char_p
        #: The code path this build runs on this CPU (``"portable"`` or a vector path's name).
        self.path = lib.zv_ed25519_cpu_path().decode()
        self._lib = lib

    def verify_columns(self, cols: tuple) -> np.ndarray:
        """Verdicts (``uint8[n]``, 1 valid) of a chunk given as the ctypes column arguments of
        :func:`app.engine.backends.native._columns`: keys, key length, signatures, signature
        length, messages, their length, ``uint64[n + 1]`` offsets, n."""
        verdicts = np.zeros(cols[-1], dtype=np.uint8)
        self._lib.zv_ed25519_cpu_verify_chunk(*cols, verdicts.ctypes.data)
        return verdicts

    def verify_each(self, verify_address: int, cols: tuple) -> np.ndarray:
        """Verdicts of a chunk (columns as :meth:`verify_columns`) from a one-item verify with
        libsodium's signature at ``verify_address`` (libsodium's own, or
        :attr:`verify_address`), called once per item in C: the benchmarks' like-for-like loop."""
        verdicts = np.zeros(cols[-1], dtype=np.uint8)
        self._lib.zv_ed25519_cpu_verify_each(verify_address, *cols, verdicts.ctypes.data)
        return verdicts

    def verify_many(self, items: list[tuple[bytes, bytes, bytes]]) -> list[bool]:
        """Verdicts of ``(public key, message, signature)`` items in order, any lengths (a
        wrong one is False): one chunk call per run of items with the same lengths."""
        out: list[bool] = []
        start = 0
        while start < len(items):
            pk_len, sig_len = len(items[start][0]), len(items[start][2])
            end = start
            while end < len(items) and (len(items[end][0]), len(items[end][2])) == (pk_len, sig_len):
                end += 1
            run = items[start:end]
            if pk_len == 0 or sig_len == 0:
                out += [False] * len(run)
            else:
                pks = np.frombuffer(b"".join(it[0] for it in run), dtype=np.uint8).reshape(len(run), pk_len)
                sigs = np.frombuffer(b"".join(it[2] for it in run), dtype=np.uint8).reshape(len(run), sig_len)
                msgs = np.frombuffer(b"".join(it[1] for it in run) + b"\0", dtype=np.uint8)
                off = np.zeros(len(run) + 1, dtype=np.uint64)
                off[1:] = np.cumsum([len(it[1]) for it in run])
                cols = (pks.ctypes.data, pk_len, sigs.ctypes.data, sig_len, msgs.ctypes.data, int(off[-1]),
                        off.ctypes.data, len(run))
                out += [bool(v) for v in self.verify_columns(cols)]
            start = end
        return out

    def bound_failures(self) -> int | None:
        """ZV_CHECK bounds-check failures so far (None: built without ``-DZV_VERIFY``)."""
        from app.engine.device import hostbuild

        return hostbuild.verify_failures(self.library)


def build(variant: str = DEFAULT) -> Path:
    """The built library of ``variant`` (:data:`VARIANTS`), cached by source hash; the
    default one is prebuilt where no compiler is (:func:`app.engine.backends.native_build.library`).
    Raises :class:`app.core.errors.KernelBuildError` when neither works."""
    from app.engine.device import hostbuild

    if variant == DEFAULT:
        return native_build.library(SOURCE)
    return hostbuild.build_code(SOURCE.read_text(), variant.replace("-", "_"), defines=VARIANTS[variant])


def libcrypto() -> ctypes.CDLL | None:
    """The libcrypto hashlib runs on, through ``_hashlib``'s own handle
    (:func:`app.engine.backends.native_build.libcrypto`), where it exports OpenSSL's SHA-512."""
    return native_build.libcrypto(OPENSSL_SHA512)


_lock = threading.Lock()
_loaded: dict[str, Ed25519Cpu] = {}
_failed: set[str] = set()


def enabled() -> bool:
    """Whether the CPU backend uses this verify (``$ZAPVERIFY_ED25519_CPU`` not ``0``)."""
    return os.environ.get(ENV_SWITCH, "1") != "0"


def load(variant: str = DEFAULT) -> Ed25519Cpu | None:
    """The library of ``variant`` (:data:`VARIANTS`), built and loaded once per process; None
    where it does not build."""
    with _lock:
        if variant not in _loaded and variant not in _failed:
            try:
                _loaded[variant] = Ed25519Cpu(ctypes.CDLL(str(build(variant))), libcrypto())
            except (KernelBuildError, OSError, AttributeError) as exc:
                log.warning("own Ed25519 CPU verify (%s) unavailable, using libsodium's: %s", variant, exc)
                _failed.add(variant)
        return _loaded.get(variant)
