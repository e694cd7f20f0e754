"""BLS12-381 on blst for the CPU backend: CoreVerify chunks (one by one or by random linear
combination) and aggregate items, in the C loops of ``native_bls.cpp``.

blst comes from the ``blspy`` wheel (PyPI), which links blst statically and exports its C API
(``blst_*``, bindings/blst.h); :class:`BlsLoops` looks the functions it needs up in blspy's
extension module with ctypes and hands their addresses to the loop library once, as
:mod:`app.engine.backends.native` does for libsodium and libsecp256k1.  A ctypes call
releases the GIL, so a chunk runs on one core while other threads run theirs.

Verdicts are, item for item, those of :func:`app.engine.reference.reference.verify_bls12_381`
and :mod:`app.engine.reference.bls_aggregate` (arkworks), which the tests keep as the second
opinion on every vector and on generated items of every mutation kind.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from app.core.batch import G2_INFINITY, AggregateItem
from app.core.errors import KernelBuildError
from app.core.schemes import Scheme
from app.engine.backends import native_build
from app.engine.reference import bls_batch, reference
from app.engine.reference.reference import BLS_POP_DST

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native_bls.cpp")

#: blst's functions in the order of ``struct zv_blst`` in native_bls.cpp.
BLST_FUNCTIONS = (
    "blst_p1_uncompress", "blst_p1_affine_in_g1", "blst_p1_affine_is_inf", "blst_p1_from_affine",
    "blst_p1_to_affine", "blst_p1_mult", "blst_p1_add_or_double_affine", "blst_p1_is_inf", "blst_p1_cneg",
    "blst_p1_affine_generator", "blst_p2_uncompress", "blst_p2_affine_in_g2", "blst_p2_affine_is_inf",
    "blst_p2_to_affine", "blst_p2_mult", "blst_p2_from_affine", "blst_p2_is_inf", "blst_p2_add_or_double",
    "blst_hash_to_g2", "blst_p2s_mult_pippenger_scratch_sizeof", "blst_p2s_mult_pippenger",
    "blst_miller_loop_n", "blst_final_exp", "blst_fp12_is_one", "blst_fp12_is_equal",
)

#: (one group's fixed cost) / (one item's cost) in a multi-pairing on blst: a final
#: exponentiation and the signatures' Miller loop over an item's share of the Miller loop,
#: its G1 and G2 scalar multiplications (bench/results/bls_batch.md); sets the group size.
FIXED_OVER_ITEM = 6.0
#: Invalid fraction above which single checks beat bisection on blst (bls_batch.FALLBACK_FRACTION
#: is arkworks'): bisecting 64 items with k invalid cost 1.02× one CoreVerify each at k = 8
#: and 1.22–1.27× at 16 and 32 (bench/results/bls_batch.md), so past about a tenth the chunk
#: goes one by one.
FALLBACK_FRACTION = 0.1
#: Items of the probe group that one chunk in ``PROBE_EVERY`` starts with while the estimate
#: is above ``FALLBACK_FRACTION`` (the others are checked one by one): a clean probe
#: batches its chunk as if the estimate were fresh, so a valid batch after bad ones is batched
#: again within a few chunks, while bad traffic pays a failed probe's cost (about 1.5
#: CoreVerify) once every PROBE_EVERY chunks.
PROBE_ITEMS = 4
PROBE_EVERY = 4

_P = ctypes.c_void_p
_SZ = ctypes.c_size_t


class _Policy(ctypes.Structure):
    """``struct zv_bls_policy`` of native_bls.cpp (bls_batch.py's constants)."""

    _fields_ = [("invalid_fraction", ctypes.c_double), ("fallback_fraction", ctypes.c_double),
                ("prior_items", ctypes.c_double), ("fixed_over_item", ctypes.c_double),
                ("min_batch", ctypes.c_uint64), ("max_group", ctypes.c_uint64), ("first_group", ctypes.c_uint64),
                ("probe_items", ctypes.c_uint64)]


class BlsLoops:
    """The built loop library bound to blspy's blst.

    Safe to share between threads: the only state is the running invalid-fraction estimate
    of batches, whose lost updates only change a group size.
    """

    def __init__(self, lib: ctypes.CDLL, blst: ctypes.CDLL):
        addrs = (ctypes.c_void_p * len(BLST_FUNCTIONS))(
            *(ctypes.cast(getattr(blst, name), _P).value for name in BLST_FUNCTIONS))
        lib.zv_bls_init.argtypes = [_P, _SZ]
        lib.zv_bls_init.restype = _SZ
        want = lib.zv_bls_init(addrs, len(BLST_FUNCTIONS))
        if want != len(BLST_FUNCTIONS):
            raise AttributeError(f"native_bls.cpp takes {want} blst functions, {len(BLST_FUNCTIONS)} given")
        lib.zv_bls_verify.argtypes = [_P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, _P, _P, _P, _P]
        lib.zv_bls_verify.restype = None
        lib.zv_bls_aggregate.argtypes = [_P, _SZ, _P, _P, _SZ, _P, _SZ, _P, _SZ, _P, _SZ, ctypes.c_int]
        lib.zv_bls_aggregate.restype = ctypes.c_int
        for name in ("zv_bls_key_valid", "zv_bls_sig_valid"):
            getattr(lib, name).argtypes = [ctypes.c_char_p, _SZ]
            getattr(lib, name).restype = ctypes.c_int
        self._lib = lib
        self._dst = BLS_POP_DST
        #: Running invalid fraction of the batches verified here (bls_batch.py's estimate).
        self.invalid_fraction = 0.0
        #: Fewer live items than this in a chunk are checked one by one (bls_batch.MIN_BATCH).
        self.min_batch = bls_batch.MIN_BATCH
        #: Multi-pairings computed so far (single checks included), for tests and benchmarks.
        self.pairing_checks = 0
        self._chunks = 0  # chunks batched so far: every PROBE_EVERY-th may probe

    def verify(self, pks: np.ndarray, sigs: np.ndarray, msgs: np.ndarray, offsets: np.ndarray,
               rlc: bool = True) -> bytes:
        """CoreVerify verdicts (POP suite, KeyValidate) of one chunk: ``n`` bytes 0/1.

        Args:
            pks: ``uint8[n, pk_len]``; sigs: ``uint8[n, sig_len]``; msgs: ``uint8[M]``;
                offsets: ``[n + 1]`` message offsets into ``msgs`` (clamped as a slice).
                A key or signature length other than 48 / 96 is a false verdict.
            rlc: check the items by random linear combination (scalars of 64 bits from
                ``os.urandom``; docs/bls-aggregate.md), else one CoreVerify each.  The same
                verdicts either way.
        """
        n, _alive, cols = native_build.columns(pks, sigs, msgs, offsets)
        verdicts = np.zeros(n, dtype=np.uint8)
        stats = np.zeros(3, dtype=np.uint64)
        policy = None
        scalars = b""
        if rlc:
            self._chunks += 1
            policy = _Policy(self.invalid_fraction, FALLBACK_FRACTION, bls_batch.PRIOR_ITEMS,
                             FIXED_OVER_ITEM, self.min_batch, bls_batch.MAX_GROUP, bls_batch.FIRST_GROUP,
                             PROBE_ITEMS if self._chunks % PROBE_EVERY == 0 else 0)
            scalars = os.urandom(8 * n)  # the CSPRNG, after the inputs are fixed
        self._lib.zv_bls_verify(*cols, self._dst, len(self._dst),
                                ctypes.byref(policy) if policy is not None else None, scalars,
                                verdicts.ctypes.data, stats.ctypes.data)
        live, bad, products = (int(x) for x in stats)
        self.pairing_checks += products
        if rlc and live:
            self.invalid_fraction += bls_batch.EWMA * (bad / live - self.invalid_fraction)
        return verdicts.tobytes()

    def core_verify(self, pk, msg, sig, ctx=b"", **_options) -> bool:
        """CoreVerify of one item (the signature of :func:`app.engine.reference.reference.verify_bls12_381`,
        whose verdict it gives: ``ctx`` and options do not apply); never raises for bad input."""
        pk, msg, sig = bytes(pk), bytes(msg), bytes(sig)
        if len(pk) != 48 or len(sig) != 96:
            return False
        cols = (np.frombuffer(pk, np.uint8).reshape(1, 48), np.frombuffer(sig, np.uint8).reshape(1, 96),
                np.frombuffer(msg or b"\0", np.uint8), np.array([0, len(msg)], dtype=np.uint64))
        return self.verify(*cols, rlc=False) == b"\x01"

    def key_valid(self, pk: bytes) -> bool:
        """KeyValidate (draft-04 §2.5) of one key on blst: what a CoreVerify item's key must pass."""
        return bool(self._lib.zv_bls_key_valid(bytes(pk), len(pk)))

    def signature_valid(self, sig: bytes) -> bool:
        """signature_to_point with the subgroup check (the identity passes) on blst."""
        return bool(self._lib.zv_bls_sig_valid(bytes(sig), len(sig)))

    def aggregate(self, pks: Sequence[bytes], msgs: Sequence[bytes], sig: bytes, fast: bool) -> bool:
        """FastAggregateVerify (``fast``: one message) or AggregateVerify of one item, with
        the rules of :mod:`app.engine.reference.bls_aggregate`; never raises for bad input."""
        if not pks or (not fast and len(pks) != len(msgs)) or (fast and len(msgs) != 1):
            return False
        if any(len(pk) != 48 for pk in pks):
            return False
        groups: dict[bytes, int] = {}  # equal messages share a group: their keys are summed
        if fast:
            distinct, index = [bytes(msgs[0])], np.zeros(len(pks), dtype=np.uint32)
        else:
            index = np.fromiter((groups.setdefault(bytes(m), len(groups)) for m in msgs), dtype=np.uint32,
                                count=len(pks))
            distinct = list(groups)
        offsets = np.zeros(len(distinct) + 1, dtype=np.uint64)
        np.cumsum([len(m) for m in distinct], out=offsets[1:])
        keys = b"".join(bytes(pk) for pk in pks)
        joined = b"".join(distinct)
        sig = bytes(sig)
        return bool(self._lib.zv_bls_aggregate(keys, len(pks), index.ctypes.data, joined, len(joined),
                                               offsets.ctypes.data, len(distinct), sig, len(sig), self._dst,
                                               len(self._dst), int(fast)))

    def aggregate_item(self, item: AggregateItem) -> bool:
        """The verdict of one :class:`AggregateItem`, as
        :func:`app.engine.reference.bls_aggregate.verify_item` gives it."""
        if item.mode == "fast_aggregate" and item.variant in ("ietf", "eth"):
            if item.variant == "eth" and not item.public_keys and bytes(item.signature) == G2_INFINITY:
                return len(item.messages) == 1  # eth_fast_aggregate_verify's empty-participation rule
            return self.aggregate(item.public_keys, item.messages, item.signature, fast=True)
        if item.mode == "aggregate" and item.variant == "ietf":
            return self.aggregate(item.public_keys, item.messages, item.signature, fast=False)
        return False


def blst_library() -> ctypes.CDLL:
    """blspy's extension module as a library handle: the blst it links, with its C API
    exported.  Raises ImportError without blspy, AttributeError where a function is missing."""
    import blspy

    so = ctypes.CDLL(blspy.__file__)
    missing = [name for name in BLST_FUNCTIONS if not hasattr(so, name)]
    if missing:
        raise AttributeError(f"blspy's module does not export {', '.join(missing)}")
    return so


_lock = threading.Lock()
_loops: BlsLoops | None = None
_failed = False


def loaded() -> BlsLoops | None:
    """The loops if this process has loaded them already (:func:`loops`), else None; never builds."""
    return _loops


def verifier(scheme: Scheme) -> Callable[..., bool]:
    """The fastest single-item verifier of ``scheme`` on this CPU that never builds anything:
    for BLS12-381, blst's CoreVerify where the loops are loaded (:meth:`BlsLoops.core_verify`,
    the CPU backend's rate), else and for every other scheme the reference's
    (:func:`app.engine.reference.reference.verifier`); the same verdicts either way."""
    loops = _loops
    if scheme.family == "bls12-381" and loops is not None:
        return loops.core_verify
    return reference.verifier(scheme)


def loops() -> BlsLoops | None:
    """The blst loops, built (or found prebuilt) and loaded once per process; None where that
    fails (no compiler and no prebuilt library, no blspy, a blspy without the functions), and
    the CPU backend verifies BLS12-381 in the Python loop over arkworks."""
    global _loops, _failed
    with _lock:
        if _loops is None and not _failed:
            try:
                _loops = BlsLoops(ctypes.CDLL(str(native_build.library(SOURCE))), blst_library())
            except (KernelBuildError, OSError, AttributeError, ImportError) as exc:
                log.warning("blst loops unavailable, BLS12-381 in the Python loop: %s", exc)
                _failed = True
        return _loops
