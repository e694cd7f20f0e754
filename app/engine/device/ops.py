"""The kernel operations, written once for every device that runs the kernel sources.

A *device* (:class:`Device`) is where kernels run: :class:`app.engine.device.hostlib.HostDevice`
(the g++ build, numpy arrays) or :class:`app.engine.device.cudadev.CupyDevice` (NVRTC via
CuPy, device arrays).  The functions here hold what the two share: argument order of every
entry point, buffer sizes, and the sequence of launches that builds a Merkle root.  Device
buffers are opaque to this module; inputs and outputs at the edges are numpy arrays.

Functions taking host arrays (:func:`hash_messages`, :func:`batch_leaves`, :func:`root`,
:func:`verify_batch`, :func:`verify_and_commit`) are the Python wrappers of the batch
kernels; the others work on device buffers so a caller can chain launches (verdicts stay
on the device between verification and the Merkle leaves).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from app.core.batch import Batch
from app.core.errors import EmptyBatch, RequestError
from app.engine.device.registry import HASH, HASH_KERNELS, MERKLE, KernelSource, VerifyKernel

#: Levels at or below this many nodes are finished by one block (zv_merkle_tail).
TAIL_MAX = 4096
#: Threads per block of the hash and Merkle kernels, and of the tail's single block (a
#: device lowers either to what the compiled kernel's registers allow).
HASH_BLOCK = 256
TAIL_BLOCK = 512


class Device(Protocol):
    """Where kernels run.  Buffers are opaque handles of uint8 bytes."""

    name: str

    def put(self, a: np.ndarray) -> Any:
        """A device buffer holding the bytes of the C-contiguous array ``a`` (a copy, or
        ``a`` itself where the device reads host memory in place)."""

    def put_columns(self, arrays: list[np.ndarray]) -> list[Any]:
        """Device buffers of each array of ``arrays`` (a batch's columns), as :meth:`put`
        would give them; a device may copy them together (one transfer per batch)."""

    def alloc(self, nbytes: int) -> Any:
        """An uninitialised buffer of ``nbytes`` bytes (at least one)."""

    def get(self, buf: Any, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` bytes of ``buf`` as a fresh host ``uint8`` array, after all
        queued work is done; raises :class:`app.core.errors.KernelLaunchError` if it failed."""

    def launch(self, source: KernelSource, entry: str, threads: int, args: tuple, *,
               block: int = HASH_BLOCK, one_block: bool = False) -> None:
        """Queue ``entry`` of ``source`` over ``threads`` items (grid-stride, so the grid may
        be smaller), or on exactly one block of ``block`` threads when ``one_block``.
        ``args`` are buffers and numpy scalars (``np.uint32``/``np.uint64``) in the entry's
        parameter order."""

    def sync(self) -> None:
        """Wait for queued work; raises :class:`app.core.errors.KernelLaunchError` if it failed."""


@dataclass
class DeviceBatch:
    """The columns of a :class:`Batch` as device buffers (offsets widened to u64)."""

    n: int
    code: int
    pks: Any
    pk_len: int
    sigs: Any
    sig_len: int
    msgs: Any
    offsets: Any
    ctx: Any
    ctx_len: int
    options: int


def _contiguous(a: np.ndarray, dtype) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=dtype)


def put_batch(dev: Device, batch: Batch) -> DeviceBatch:
    """Hand the columns of ``batch`` to ``dev`` in one :meth:`Device.put_columns` call (one
    copy per batch, or in place, as the device's transfer mode says)."""
    offsets = batch.offsets if batch.offsets.dtype == np.uint64 else batch.offsets.astype(np.uint64)
    ctx = np.frombuffer(bytes(batch.ctx) or b"\0", dtype=np.uint8)
    pks, sigs, msgs, offs, ctx_buf = dev.put_columns([
        _contiguous(batch.pks, np.uint8), _contiguous(batch.sigs, np.uint8), _contiguous(batch.msgs, np.uint8),
        _contiguous(offsets, np.uint64), ctx])
    return DeviceBatch(
        n=len(batch), code=batch.scheme.code,
        pks=pks, pk_len=int(batch.pks.shape[1]), sigs=sigs, sig_len=int(batch.sigs.shape[1]),
        msgs=msgs, offsets=offs, ctx=ctx_buf, ctx_len=len(batch.ctx), options=batch.options,
    )


# ------------------------------------------------------------------ device-buffer operations
def verify(dev: Device, kernel: VerifyKernel, db: DeviceBatch) -> Any:
    """Launch ``kernel`` (the kernel contract's zv_verify_<family> shape) on ``db`` with
    ``kernel.lanes`` threads per item; returns the device buffer of ``uint8[n]`` verdicts (1 valid, 0 invalid)."""
    out = dev.alloc(db.n)
    dev.launch(kernel.source, kernel.entry, db.n * kernel.lanes,
               (db.pks, np.uint32(db.pk_len), db.sigs, np.uint32(db.sig_len), db.msgs, db.offsets,
                db.ctx, np.uint32(db.ctx_len), np.uint32(db.options), np.uint64(db.n), out),
               block=kernel.block)
    return out


def merkle_leaves(dev: Device, db: DeviceBatch, verdicts: Any, out: Any = None) -> Any:
    """Leaf hashes (docs/architecture.md, "Merkle leaf and receipts") of every item of ``db`` with device ``verdicts``
    (``uint8[n]``); returns a device buffer of ``n`` 32-byte leaves (``out`` when given: a
    device buffer of at least 32 n bytes, such as a chunk's slice of a whole batch's leaves)."""
    if out is None:
        out = dev.alloc(32 * db.n)
    dev.launch(MERKLE, "zv_merkle_leaves", db.n,
               (np.uint32(db.code), db.pks, np.uint32(db.pk_len), db.sigs, np.uint32(db.sig_len),
                db.msgs, db.offsets, verdicts, np.uint64(db.n), out))
    return out


def merkle_root_buffer(dev: Device, leaves: Any, n: int, *, tail_max: int = TAIL_MAX) -> Any:
    """RFC 6962 root of ``n`` device leaves; returns a 32-byte device buffer.

    Levels wider than ``tail_max`` nodes are one grid-wide launch each; the rest is one
    single-block launch.  ``leaves`` is not modified.  Raises :class:`EmptyBatch` for n = 0
    (the API refuses empty batches; RFC 6962 would hash the empty string).
    """
    if n < 1:
        raise EmptyBatch("a Merkle root needs at least one leaf", field="leaves")
    half = (n + 1) // 2
    bufs = [dev.alloc(32 * half), dev.alloc(32 * half)]
    src, m, k = leaves, n, 0
    while m > max(1, tail_max):
        dev.launch(MERKLE, "zv_merkle_level", (m + 1) // 2, (src, np.uint64(m), bufs[k]))
        src, k, m = bufs[k], k ^ 1, (m + 1) // 2
    root_buf = dev.alloc(32)
    dev.launch(MERKLE, "zv_merkle_tail", 1, (src, np.uint64(m), bufs[k], bufs[k ^ 1], root_buf),
               block=TAIL_BLOCK, one_block=True)
    return root_buf


def digest_size(algo: str, out_len: int | None = None) -> int:
    """Bytes per message that ``algo`` writes; checks ``out_len`` (see :func:`hash_buffer`)."""
    try:
        size = HASH_KERNELS[algo][1]
    except KeyError:
        raise RequestError(f"unknown hash {algo!r}; known: {', '.join(HASH_KERNELS)}", field="algo") from None
    if size is None:
        if out_len is None or not 0 < out_len < 2**32:
            raise RequestError(f"{algo} needs out_len in [1, 2^32)", field="out_len")
        return int(out_len)
    if out_len not in (None, size):
        raise RequestError(f"{algo} gives {size} bytes, not {out_len}", field="out_len")
    return size


def hash_buffer(dev: Device, algo: str, msgs: Any, offsets: Any, n: int, out_len: int | None = None) -> Any:
    """Run the batch kernel of ``algo`` (a key of :data:`HASH_KERNELS`) over ``n`` device
    messages; returns a device buffer of ``n * digest_size`` bytes.

    ``out_len`` is required for SHAKE (bytes per message, 1 .. 2^32 − 1) and must be None or
    the digest size otherwise; raises :class:`RequestError` naming ``algo`` or ``out_len``.
    """
    size = digest_size(algo, out_len)
    entry, fixed = HASH_KERNELS[algo]
    out = dev.alloc(n * size)
    if fixed is None:
        dev.launch(HASH, entry, n, (msgs, offsets, np.uint64(n), np.uint32(size), out))
    else:
        dev.launch(HASH, entry, n, (msgs, offsets, np.uint64(n), out))
    return out


# ------------------------------------------------------------------ host-array wrappers
def pack_messages(msgs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Messages back to back (``uint8[M]``) and their ``uint64[N+1]`` offsets."""
    offsets = np.zeros(len(msgs) + 1, dtype=np.uint64)
    if msgs:
        np.cumsum([len(m) for m in msgs], out=offsets[1:])
    return np.frombuffer(b"".join(msgs) or b"\0", dtype=np.uint8), offsets


def hash_messages(dev: Device, algo: str, msgs: Sequence[bytes], out_len: int | None = None) -> np.ndarray:
    """Hash every message of ``msgs`` with ``algo`` on ``dev``; returns ``uint8[N, L]``
    (L = the digest size, or ``out_len`` for SHAKE).  Errors as :func:`hash_buffer`."""
    size = digest_size(algo, out_len)
    n = len(msgs)
    if n == 0:
        return np.zeros((0, size), dtype=np.uint8)
    data, offsets = pack_messages(msgs)
    out = hash_buffer(dev, algo, dev.put(data), dev.put(offsets), n, out_len)
    return dev.get(out, n * size).reshape(n, size)


def batch_leaves(dev: Device, batch: Batch, verdicts: np.ndarray) -> np.ndarray:
    """Leaf hashes of ``batch`` with host ``verdicts`` (bool or uint8 ``[N]``), computed on
    ``dev``; returns ``uint8[N, 32]`` equal to :func:`app.engine.commit.merkle.batch_leaves`."""
    n = len(batch)
    if n == 0:
        return np.zeros((0, 32), dtype=np.uint8)
    db = put_batch(dev, batch)
    v = dev.put(np.ascontiguousarray(verdicts, dtype=bool).view(np.uint8))
    return dev.get(merkle_leaves(dev, db, v), 32 * n).reshape(n, 32)


def root(dev: Device, leaves: np.ndarray, *, tail_max: int = TAIL_MAX) -> bytes:
    """RFC 6962 root of host ``leaves`` (``uint8[N, 32]``) computed on ``dev``, 32 bytes.

    Raises :class:`EmptyBatch` for zero leaves and :class:`RequestError` for another shape.
    """
    leaves = np.asarray(leaves)
    if leaves.ndim != 2 or leaves.shape[1] != 32 or leaves.dtype != np.uint8:
        raise RequestError("leaves must be uint8[N, 32]", field="leaves")
    n = leaves.shape[0]
    if n == 0:
        raise EmptyBatch("a Merkle root needs at least one leaf", field="leaves")
    buf = merkle_root_buffer(dev, dev.put(np.ascontiguousarray(leaves)), n, tail_max=tail_max)
    return dev.get(buf, 32).tobytes()


def verify_batch(dev: Device, kernel: VerifyKernel, batch: Batch) -> np.ndarray:
    """Verdicts of ``batch`` from ``kernel`` on ``dev``: ``bool[N]`` in item order."""
    if len(batch) == 0:
        return np.zeros(0, dtype=bool)
    db = put_batch(dev, batch)
    return dev.get(verify(dev, kernel, db), db.n).astype(bool)


def verify_and_commit(dev: Device, kernel: VerifyKernel, batch: Batch, *,
                      tail_max: int = TAIL_MAX) -> tuple[np.ndarray, np.ndarray, bytes]:
    """Verify ``batch`` and build its Merkle tree without the verdicts leaving the device.

    Returns ``(verdicts bool[N], leaves uint8[N, 32], root 32 bytes)``; raises
    :class:`EmptyBatch` for an empty batch.
    """
    n = len(batch)
    if n == 0:
        raise EmptyBatch("a batch needs at least one item", field="count")
    db = put_batch(dev, batch)
    verdicts = verify(dev, kernel, db)
    leaves = merkle_leaves(dev, db, verdicts)
    root_buf = merkle_root_buffer(dev, leaves, n, tail_max=tail_max)
    v = dev.get(verdicts, n).astype(bool)
    return v, dev.get(leaves, 32 * n).reshape(n, 32), dev.get(root_buf, 32).tobytes()


def commit(dev: Device, batch: Batch, verdicts: np.ndarray, *, tail_max: int = TAIL_MAX) -> tuple[np.ndarray, bytes]:
    """Leaves (``uint8[N, 32]``) and RFC 6962 root of ``batch`` with host ``verdicts``
    (bool or uint8 ``[N]``), both computed on ``dev``.  Raises :class:`EmptyBatch` for N = 0.
    """
    n = len(batch)
    if n == 0:
        raise EmptyBatch("a batch needs at least one item", field="count")
    db = put_batch(dev, batch)
    v = dev.put(np.ascontiguousarray(verdicts, dtype=bool).view(np.uint8))
    leaves = merkle_leaves(dev, db, v)
    root_buf = merkle_root_buffer(dev, leaves, n, tail_max=tail_max)
    return dev.get(leaves, 32 * n).reshape(n, 32), dev.get(root_buf, 32).tobytes()


# ------------------------------------------------------------------ BLS12-381 aggregates and RLC batches
#: Item modes of zv_bls_agg_items (bls12_381_aggregate.cu ZV_BLS_AGG_*), by (mode, variant);
#: any other pair, or a length or count the kernels cannot take, is mode 0 (false).
AGG_MODES = {("fast_aggregate", "ietf"): 1, ("aggregate", "ietf"): 2, ("fast_aggregate", "eth"): 3}
#: Index meaning "no point": −G1 as a pair's P, or a pair that belongs to no item.
_NONE = np.uint64(2**64 - 1)
#: Bit of a point index naming the second buffer of its kind (zv_bls_agg_miller).
_SECOND = 1 << 63
_G1_ROW, _G2_ROW, _FP12_ROW, _G1_JAC_ROW = 96, 192, 576, 144
#: Threads per block of the BLS launches: the pairing code wants 255 registers per thread
#: (bls12_381.cuh), so blocks stay small, as the single verify's (registry, block 64).
BLS_BLOCK = 64


def _u64(values) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, dtype=np.uint64).reshape(-1))


def _launch(dev: Device, entry: str, threads: int, args: tuple) -> None:
    from app.engine.device.registry import BLS_AGGREGATE
    dev.launch(BLS_AGGREGATE, entry, threads, args, block=BLS_BLOCK)


def _pairings(dev: Device, g1a: Any, g1b: Any, g2a: Any, g2b: Any, p_idx: list, q_idx: list, pair_item: list,
              status: Any, pair_off: np.ndarray, final_status: Any, n_final: int) -> np.ndarray:
    """Miller values of every pair (one thread each), then per item or group the product over
    its pairs ``pair_off[i] .. pair_off[i+1]`` and one final exponentiation; ``uint8[n_final]``."""
    n_pairs = len(p_idx)
    f = dev.alloc(_FP12_ROW * max(1, n_pairs))
    if n_pairs:
        _launch(dev, "zv_bls_agg_miller", n_pairs,
                (g1a, g1b, g2a, g2b, dev.put(_u64(p_idx)), dev.put(_u64(q_idx)), dev.put(_u64(pair_item)), status,
                 np.uint64(n_pairs), f))
    out = dev.alloc(n_final)
    _launch(dev, "zv_bls_agg_final", n_final, (f, dev.put(_u64(pair_off)), final_status, np.uint64(n_final), out))
    return dev.get(out, n_final)


def key_sum_rounds(ranges: Sequence[tuple[int, int]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The launches of zv_bls_agg_key_sum that sum each range ``lo .. hi`` of key rows into
    row ``lo`` as a tree: per round k (stride s = 2^k) ``(dst, src)``, ``uint64[m]`` each, for
    every key j of a range with (j − lo) a multiple of 2s and src = j + s where that is < hi;
    round 0 also lists the keys without a partner (src = 2^64 − 1: copied), later rounds only
    pairs.  ceil(log2 n) rounds for the longest range of n keys (one round when n ≤ 2), so an
    item of 2,048 keys takes 11 rounds of one G1 addition per thread, not 2,047 additions in
    one thread.  Empty ranges are skipped; none at all gives no rounds."""
    ranges = [(lo, hi) for lo, hi in ranges if hi > lo]
    if not ranges:
        return []
    los = np.array([lo for lo, _ in ranges], dtype=np.int64)
    lens = np.array([hi - lo for lo, hi in ranges], dtype=np.int64)
    base = np.repeat(los, lens)
    offset = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    end = base + np.repeat(lens, lens)
    key = base + offset
    rounds = []
    stride = 1
    while stride == 1 or stride < int(lens.max()):
        lead = offset % (2 * stride) == 0
        dst, src = key[lead], key[lead] + stride
        has = src < end[lead]
        if stride == 1:
            src_u = np.where(has, src, -1).astype(np.int64).view(np.uint64)
            rounds.append((dst.astype(np.uint64), np.ascontiguousarray(src_u)))
        else:
            rounds.append((dst[has].astype(np.uint64), src[has].astype(np.uint64)))
        stride *= 2
    return rounds


def verify_aggregates(dev: Device, items: Sequence[Any]) -> np.ndarray:
    """Verdicts (``bool[N]``, input order) of BLS12-381 aggregate items
    (:class:`app.core.batch.AggregateItem`) on ``dev``, by the launches of
    bls12_381_aggregate.cu: KeyValidate per key, hash_to_G2 per message, the per-item rules,
    each fast item's key sum as a tree (:func:`key_sum_rounds`), one Miller loop per pair, per
    item the product and one final exponentiation.

    Semantics are those of :func:`app.engine.reference.bls_aggregate.verify_item`
    (FastAggregateVerify, draft-irtf-cfrg-bls-signature-04 §3.3.4, or the consensus specs'
    eth_fast_aggregate_verify under ``variant`` ``eth``; AggregateVerify §2.9): what the
    kernels cannot take — a key not 48 bytes, a signature not 96, a message count that does
    not fit the mode, an unknown mode or variant — is ``False`` here, as the reference
    answers.  Raises :class:`app.core.errors.KernelLaunchError` when the device fails.
    """
    n = len(items)
    if n == 0:
        return np.zeros(0, dtype=bool)
    modes = np.zeros(n, dtype=np.uint8)
    sigs = np.zeros((n, 96), dtype=np.uint8)
    key_off = [0]
    keys: list[bytes] = []
    msgs: list[bytes] = []
    p_idx: list = []
    q_idx: list = []
    pair_item: list = []
    pair_off = [0]
    fast_keys: list[tuple[int, int]] = []
    for i, it in enumerate(items):
        mode = AGG_MODES.get((it.mode, it.variant), 0)
        pks, ms = list(it.public_keys), list(it.messages)
        fits = (len(it.signature) == 96 and all(len(pk) == 48 for pk in pks)
                and (len(ms) == 1 if mode in (1, 3) else len(ms) == len(pks)))
        if mode and fits:
            modes[i] = mode
            sigs[i] = np.frombuffer(bytes(it.signature), dtype=np.uint8)
            k0, m0 = len(keys), len(msgs)
            keys += [bytes(pk) for pk in pks]
            if pks:  # no keys: no pairs (decided by zv_bls_agg_items alone)
                if mode == 2:
                    msgs += [bytes(m) for m in ms]
                    p_idx += [k0 + j for j in range(len(pks))]
                    q_idx += [m0 + j for j in range(len(pks))]
                else:
                    fast_keys.append((k0, len(keys)))
                    msgs.append(bytes(ms[0]))
                    p_idx.append(_SECOND | i)  # the key sum, row i of the second G1 buffer
                    q_idx.append(m0)
                pair_item += [i] * (len(p_idx) - len(pair_item))
                p_idx.append(_NONE)  # (−G1, σ): σ is row i of the second G2 buffer
                q_idx.append(_SECOND | i)
                pair_item.append(i)
        key_off.append(len(keys))
        pair_off.append(len(p_idx))
    n_keys = len(keys)
    key_pts, key_ok = dev.alloc(_G1_ROW * max(1, n_keys)), dev.alloc(max(1, n_keys))
    if n_keys:
        _launch(dev, "zv_bls_agg_key_validate", n_keys,
                (dev.put(np.frombuffer(b"".join(keys), dtype=np.uint8)), np.uint64(n_keys), key_pts, key_ok))
    key_sums = dev.alloc(_G1_JAC_ROW * max(1, n_keys))
    for k, (dst, src) in enumerate(key_sum_rounds(fast_keys)):
        _launch(dev, "zv_bls_agg_key_sum", len(dst), (key_pts, dev.put(dst), dev.put(src), np.uint64(len(dst)),
                                                     np.uint32(k == 0), key_sums))
    hashes = dev.alloc(_G2_ROW * max(1, len(msgs)))
    if msgs:
        data, offsets = pack_messages(msgs)
        _launch(dev, "zv_bls_agg_hash", len(msgs), (dev.put(data), dev.put(offsets), np.uint64(len(msgs)), hashes))
    status, agg_pts, sig_pts = dev.alloc(n), dev.alloc(_G1_ROW * n), dev.alloc(_G2_ROW * n)
    _launch(dev, "zv_bls_agg_items", n, (dev.put(modes), dev.put(_u64(key_off)), key_ok, key_sums, dev.put(sigs),
                                         np.uint64(n), status, agg_pts, sig_pts))
    return _pairings(dev, key_pts, agg_pts, hashes, sig_pts, p_idx, q_idx, pair_item, status,
                     np.asarray(pair_off), status, n).astype(bool)


def rlc_scalars(n: int) -> np.ndarray:
    """``uint64[n]`` non-zero scalars from the OS CSPRNG (``secrets``), drawn per batch after its
    inputs are fixed and never derived from them (docs/bls-aggregate.md, section 4)."""
    import secrets

    r = np.frombuffer(secrets.token_bytes(8 * n), dtype=np.uint64).copy()
    for i in np.flatnonzero(r == 0):
        while not r[i]:
            r[i] = np.uint64(secrets.randbits(64))
    return r


@dataclass
class RlcReport:
    """What one :func:`verify_bls_rlc` did: groups checked, groups that failed, items whose
    verdict came from a single CoreVerify (the failed groups' decodable items)."""

    groups: int = 0
    failed_groups: int = 0
    singles: int = 0


def verify_bls_rlc(dev: Device, kernel: VerifyKernel, batch: Batch, *, group: int = 64,
                   scalars: np.ndarray | None = None) -> tuple[np.ndarray, RlcReport]:
    """Verdicts (``bool[N]``) of a ``bls12-381`` batch by random linear combination on ``dev``,
    each equal to the item's single CoreVerify (draft-irtf-cfrg-bls-signature-05 §2.7, POP
    suite) except with probability ≤ 2^-64 per group check.

    Items are cut into consecutive groups of ``group``; per group, with r_i = ``scalars[i]``
    (``uint64[N]``, non-zero; default :func:`rlc_scalars`):
    ∏ e(r_i·PK_i, H(m_i)) · e(−G1, Σ r_i·σ_i) == 1 — s + 1 Miller loops and one final
    exponentiation for s items.  Items that do not decode are ``False`` and leave their group.
    A group that fails has each of its decodable items verified alone by ``kernel`` (the
    single-verify entry point, exact), the CPU path's exact fallback for a failed set
    (app/engine/reference/bls_batch.py).  Batches of fewer than two items, or with keys that
    are not 48 bytes, go to ``kernel`` directly.  Raises
    :class:`app.core.errors.KernelLaunchError` when the device fails.
    """
    n = len(batch)
    report = RlcReport()
    if n < 2 or batch.pks.shape[1] != 48:
        return verify_batch(dev, kernel, batch), report
    r = rlc_scalars(n) if scalars is None else _u64(scalars)
    if r.shape != (n,) or not r.all():
        raise RequestError(f"scalars must be {n} non-zero uint64", field="scalars")
    db = put_batch(dev, batch)
    status, spk, ssig = dev.alloc(n), dev.alloc(_G1_ROW * n), dev.alloc(_G2_ROW * n)
    _launch(dev, "zv_bls_rlc_prepare", n, (db.pks, db.sigs, dev.put(r), np.uint64(n), status, spk, ssig))
    hashes = dev.alloc(_G2_ROW * n)
    _launch(dev, "zv_bls_agg_hash", n, (db.msgs, db.offsets, np.uint64(n), hashes))
    size = max(1, int(group))
    bounds = list(range(0, n, size)) + [n]
    g = len(bounds) - 1
    gsig = dev.alloc(_G2_ROW * g)
    members = dev.put(np.arange(n, dtype=np.uint64))
    _launch(dev, "zv_bls_rlc_group_sig", g, (ssig, status, dev.put(_u64(bounds)), members, np.uint64(g), gsig))
    p_idx: list = []
    q_idx: list = []
    pair_item: list = []
    pair_off = [0]
    for k in range(g):
        lo, hi = bounds[k], bounds[k + 1]
        p_idx += range(lo, hi)
        q_idx += range(lo, hi)
        pair_item += range(lo, hi)
        p_idx.append(_NONE)  # (−G1, Σ r_i·σ_i): row k of the group sums, the second G2 buffer
        q_idx.append(_SECOND | k)
        pair_item.append(_NONE)
        pair_off.append(len(p_idx))
    passed = _pairings(dev, spk, spk, hashes, gsig, p_idx, q_idx, pair_item, status, np.asarray(pair_off),
                       dev.put(np.ones(g, dtype=np.uint8)), g).astype(bool)
    live = dev.get(status, n) == 1
    out = live.copy()
    report.groups = g
    for failed in np.flatnonzero(~passed):
        lo, hi = bounds[int(failed)], bounds[int(failed) + 1]
        report.failed_groups += 1
        report.singles += int(live[lo:hi].sum())
        out[lo:hi] = live[lo:hi] & verify_batch(dev, kernel, batch.slice(lo, hi))
    return out, report
