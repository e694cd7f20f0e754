"""Native chunk loops for the CPU backend (``native_loops.cpp``), driving the libraries' own C
entry points.

:func:`loops` builds ``native_loops.cpp`` with the kernels' host build
(:mod:`app.engine.device.hostbuild`, cached by source hash) and hands it the addresses of
libsodium's ``crypto_sign_ed25519_verify_detached`` (PyNaCl's bundled copy), of
libsecp256k1's ECDSA parse / normalize / verify and BIP-340 x-only parse / Schnorr verify
functions (coincurve's bundled copy, with its global context; one Schnorr verify per item,
as upstream libsecp256k1 has no BIP-340 batch verification: its batch module, PR #1134 of
bitcoin-core/secp256k1, is unmerged, and coincurve 21 binds none) and of a SHA-256:
OpenSSL's low-level one from the libcrypto hashlib runs on where there is one
(:func:`_libcrypto`), else libsodium's ``crypto_hash_sha256``.  A ctypes
call releases the GIL, so one call verifies and leaf-hashes a whole chunk on one core while
other threads run theirs; :meth:`NativeLoops.merkle_root` builds a batch's tree the same way.
Ed25519 chunks take their verdicts from our own verify (:mod:`app.engine.backends.ed25519_cpu`,
libsodium's rules; libsodium's where it does not build or ``$ZAPVERIFY_ED25519_CPU=0``) and
ML-DSA chunks from our own code (:mod:`app.engine.backends.native_ml_dsa`, OpenSSL's verdicts);
both are libraries of their own, and their chunks are leaf-hashed here.

Verdicts are, item for item, those of :mod:`app.engine.reference.reference` (the same library
functions under the same length and prehash rules; for Ed25519 code held to libsodium's by
``scripts/agreement --scheme ed25519-cpu``, for ML-DSA to OpenSSL's by tests/test_native_ml_dsa.py
and ``scripts/agreement --scheme ml-dsa --kernel cpu``); tests check it on every vector.
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import threading
from pathlib import Path

import numpy as np

from app.core.errors import KernelBuildError
from app.core.schemes import SCHEMES
from app.engine.backends import ed25519_cpu, native_bls, native_build, native_ml_dsa

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native_loops.cpp")
#: Scheme families with a native loop (those a loaded library serves: :attr:`NativeLoops.families`;
#: bls12-381: blst's, :mod:`app.engine.backends.native_bls`, where blspy loads).
FAMILIES = frozenset({"ed25519", "secp256k1", "bip340", "ml-dsa", "bls12-381"})

#: OpenSSL's low-level SHA-256 (openssl/sha.h), in the order zv_use_openssl_sha256 takes them.
_OPENSSL_SHA256 = ("SHA256_Init", "SHA256_Update", "SHA256_Final")

_P = ctypes.c_void_p
_SZ = ctypes.c_size_t
_U8 = ctypes.c_ubyte


class NativeLoops:
    """The built library plus the library entry points it calls.

    :meth:`run` verifies one chunk of columns; it never raises for bad items (a bad length,
    key or signature is a ``0`` verdict).
    """

    def __init__(self, lib: ctypes.CDLL):
        import nacl._sodium
        from coincurve._libsecp256k1 import ffi as k1_ffi

        from app.core.encoding import secp256k1_lib

        sodium = ctypes.CDLL(nacl._sodium.__file__)  # the copy PyNaCl loaded and initialised
        k1 = ctypes.CDLL(_k1_path())  # coincurve's bundled libsecp256k1
        addr = lambda so, name: ctypes.cast(getattr(so, name), _P).value  # noqa: E731
        self._ed = (addr(sodium, "crypto_sign_ed25519_verify_detached"),)
        #: Ed25519 verdicts come from our own verify (:mod:`app.engine.backends.ed25519_cpu`,
        #: libsodium's rules) where it builds, else from libsodium's: ``"own"`` or ``"libsodium"``.
        self._own_ed = ed25519_cpu.load() if ed25519_cpu.enabled() else None
        self.ed25519 = "own" if self._own_ed is not None else "libsodium"
        #: Which SHA-256 the loops hash with: ``"openssl"`` or ``"libsodium"``.
        self.sha256 = "libsodium"
        self._sha = addr(sodium, "crypto_hash_sha256")
        crypto = _libcrypto()
        lib.zv_use_openssl_sha256.argtypes = [_P, _P, _P]
        if crypto is not None and lib.zv_use_openssl_sha256(*(addr(crypto, name) for name in _OPENSSL_SHA256)):
            self.sha256, self._sha = "openssl", addr(lib, "zv_openssl_sha256")
        _, _, ctx = secp256k1_lib()
        self._k1 = tuple(addr(k1, n) for n in ("secp256k1_ec_pubkey_parse", "secp256k1_ecdsa_signature_parse_compact",
                                                "secp256k1_ecdsa_signature_normalize", "secp256k1_ecdsa_verify"))
        self._k1_ctx = int(k1_ffi.cast("uintptr_t", ctx))
        # BIP-340: one verify per item; upstream libsecp256k1 has no batch verification.
        self._bip340 = tuple(addr(k1, n) for n in ("secp256k1_xonly_pubkey_parse", "secp256k1_schnorrsig_verify"))
        lib.zv_cpu_ed25519.argtypes = [_P, _P, _U8, _P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P, _P]
        lib.zv_cpu_ed25519.restype = None
        lib.zv_cpu_secp256k1.argtypes = [_P, _P, _P, _P, _P, _P, _U8, ctypes.c_int, ctypes.c_int,
                                         _P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P, _P]
        lib.zv_cpu_secp256k1.restype = None
        lib.zv_cpu_bip340.argtypes = [_P, _P, _P, _P, _U8, _P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P, _P]
        lib.zv_cpu_bip340.restype = None
        lib.zv_leaves.argtypes = [_P, _U8, _P, _P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P]
        lib.zv_leaves.restype = None
        lib.zv_merkle_root.argtypes = [_P, _P, _SZ, _P]
        lib.zv_merkle_root.restype = None
        self._lib = lib
        # ML-DSA: our own verify (native_ml_dsa.cpp, a library of its own); leaves hashed here.
        # Where it does not load, ML-DSA alone falls back (to OpenSSL's, through the Python
        # loop), not every family with it.
        self._ml_dsa: native_ml_dsa.MlDsaVerifier | None = None
        try:
            self._ml_dsa = native_ml_dsa.load()
        except (KernelBuildError, OSError, AttributeError) as exc:
            log.warning("own ML-DSA CPU verify unavailable, using OpenSSL's: %s", exc)
        #: The blst loops for BLS12-381 chunks, or None (no blspy): then the Python loop.
        self.bls = native_bls.loops()
        #: The families :meth:`run` verifies here: ML-DSA only with a vector path (AVX2 or
        #: AVX-512), as our portable path is no faster than OpenSSL's (bench/results/ml_dsa_cpu.md);
        #: BLS12-381 where blst loaded.
        vector_ml_dsa = self._ml_dsa is not None and self._ml_dsa.best_isa != 0
        self.families = FAMILIES - ({"ml-dsa"} if not vector_ml_dsa else set()) \
            - ({"bls12-381"} if self.bls is None else set())

    def run(self, family: str, code: int, pks: np.ndarray, sigs: np.ndarray, msgs: np.ndarray,
            offsets: np.ndarray, prehashed: bool = False, allow_high_s: bool = False,
            ctx: bytes = b"", bls_batch: bool = True) -> tuple[bytes, bytes]:
        """Verify and leaf-hash one chunk.

        Args:
            family: ``"ed25519"``, ``"secp256k1"``, ``"bip340"``, ``"ml-dsa"`` or ``"bls12-381"``
                (:attr:`families`).
            code: the scheme's one-byte code (the leaf's first data byte).
            pks: ``uint8[n, pk_len]``; sigs: ``uint8[n, sig_len]``; msgs: ``uint8[M]``.
            offsets: ``[n + 1]`` message offsets relative to ``msgs`` (any integer dtype).
            ctx: the batch's context string (ML-DSA; the other families have none).
            bls_batch: BLS12-381 by random linear combination (:meth:`native_bls.BlsLoops.verify`).
        Returns:
            (``n`` verdict bytes 0/1, ``32·n`` bytes of leaf hashes), as the Python loop returns.
        """
        n, _alive, cols = native_build.columns(pks, sigs, msgs, offsets)
        verdicts = np.zeros(n, dtype=np.uint8)
        leaves = np.empty((n, 32), dtype=np.uint8)
        if family == "ed25519" and self._own_ed is not None:
            verdicts = self._own_ed.verify_columns(cols)
            self._lib.zv_leaves(self._sha, code, verdicts.ctypes.data, *cols, leaves.ctypes.data)
        elif family == "ed25519":
            self._lib.zv_cpu_ed25519(*self._ed, self._sha, code, *cols, verdicts.ctypes.data, leaves.ctypes.data)
        elif family == "secp256k1":
            self._lib.zv_cpu_secp256k1(*self._k1, self._k1_ctx, self._sha, code, int(prehashed),
                                       int(allow_high_s), *cols, verdicts.ctypes.data, leaves.ctypes.data)
        elif family == "bip340":
            self._lib.zv_cpu_bip340(*self._bip340, self._k1_ctx, self._sha, code, *cols, verdicts.ctypes.data,
                                    leaves.ctypes.data)
        elif family == "ml-dsa" and self._ml_dsa is not None:
            level = native_ml_dsa.LEVELS[next(s.id for s in SCHEMES.values() if s.code == code)]
            pk_col, sig_col, msg_col, off_col = _alive
            verdicts = self._ml_dsa.verdicts(level, pk_col, sig_col, msg_col, off_col, ctx)
            self._lib.zv_leaves(self._sha, code, verdicts.ctypes.data, *cols, leaves.ctypes.data)
        elif family == "bls12-381" and self.bls is not None:
            flags = self.bls.verify(pks, sigs, msgs, offsets, rlc=bls_batch)
            return flags, self.leaves(code, flags, pks, sigs, msgs, offsets)
        else:
            raise ValueError(f"no native loop for {family!r}")
        return verdicts.tobytes(), leaves.tobytes()

    def leaves(self, code: int, verdicts: bytes, pks: np.ndarray, sigs: np.ndarray, msgs: np.ndarray,
               offsets: np.ndarray) -> bytes:
        """Leaf-hash one chunk verified elsewhere: ``n`` verdict bytes (0/1) and the columns
        as for :meth:`run`; returns ``32·n`` bytes, those of
        :func:`app.engine.commit.merkle.leaf_hash`."""
        n, _alive, cols = native_build.columns(pks, sigs, msgs, offsets)
        if len(verdicts) != n:
            raise ValueError(f"{n} offsets' items but {len(verdicts)} verdicts")
        out = np.empty((n, 32), dtype=np.uint8)
        flags = np.frombuffer(verdicts, dtype=np.uint8)
        self._lib.zv_leaves(self._sha, code, flags.ctypes.data, *cols, out.ctypes.data)
        return out.tobytes()

    def merkle_root(self, leaves: np.ndarray) -> bytes:
        """RFC 6962 §2.1 root of ``leaves`` (``uint8[n, 32]`` leaf hashes), 32 bytes: the value
        of :func:`app.engine.commit.merkle.root`, computed with the GIL released."""
        nodes = np.array(leaves, dtype=np.uint8, order="C", copy=True).reshape(-1, 32)
        out = np.empty(32, dtype=np.uint8)
        self._lib.zv_merkle_root(self._sha, nodes.ctypes.data, nodes.shape[0], out.ctypes.data)
        return out.tobytes()


def _libcrypto() -> ctypes.CDLL | None:
    """The libcrypto hashlib runs on where it exports OpenSSL's SHA256_* functions
    (:func:`app.engine.backends.native_build.libcrypto`), else None."""
    return native_build.libcrypto(_OPENSSL_SHA256)


#: The C++ sources built into libraries of their own, as :func:`native_build.library` takes
#: them (source, included files, include folders): these loops and our own verifies.
LIBRARIES = ((SOURCE, (), ()), (ed25519_cpu.SOURCE, (), ()), (native_bls.SOURCE, (), ()),
             (native_ml_dsa.SOURCE, native_ml_dsa.EXTRA, native_ml_dsa.INCLUDE_DIRS))


def prebuilt_path(directory: str | Path, source: Path = SOURCE) -> Path:
    """:func:`app.engine.backends.native_build.prebuilt_path`, of ``native_loops.cpp`` by default."""
    return native_build.prebuilt_path(directory, source)


def prebuild(directory: str | Path) -> Path:
    """Build the native loops and the libraries of our own verifies (:data:`LIBRARIES`) into
    ``directory`` for a host without a compiler (the CPU image builds them in its build
    stage); returns the loops' library path.  Raises
    :class:`app.core.errors.KernelBuildError` when a build fails."""
    for source, extra, include_dirs in LIBRARIES:
        out = native_build.prebuilt_path(directory, source, extra)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(native_build.build(source, extra, include_dirs), out)
    return prebuilt_path(directory)


def library() -> Path:
    """The native loops' library (:func:`app.engine.backends.native_build.library`)."""
    return native_build.library(SOURCE)


def _k1_path() -> str:
    import coincurve

    return str(next(Path(coincurve.__file__).parent.glob("_libsecp256k1*.so")))


_lock = threading.Lock()
_loops: NativeLoops | None = None
_failed = False


def loaded() -> NativeLoops | None:
    """The native loops if this process has already loaded them (:func:`loops`), else None;
    never builds, so a caller on a request path never waits for a compiler."""
    return _loops


def leaf_hasher() -> NativeLoops | None:
    """The loaded loops (:func:`loaded`) where they hash leaves faster than hashlib, that is
    with OpenSSL's SHA-256 (libsodium's portable one is slower than hashlib's four calls);
    else None, and the caller hashes with :func:`app.engine.commit.merkle.leaf_hash`."""
    hasher = loaded()
    return hasher if hasher is not None and hasher.sha256 == "openssl" else None


def loops() -> NativeLoops | None:
    """The native loops, built (or found prebuilt, :func:`prebuild`) and loaded once per
    process; None where neither works (no C++ compiler and no prebuilt library, a library
    without the exported symbols), and the Python loop is used."""
    global _loops, _failed
    with _lock:
        if _loops is None and not _failed:
            try:
                _loops = NativeLoops(ctypes.CDLL(str(library())))
            except (KernelBuildError, OSError, AttributeError, ImportError) as exc:
                log.warning("native CPU loops unavailable, using the Python loop: %s", exc)
                _failed = True
        return _loops
