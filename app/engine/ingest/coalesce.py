"""Small frames of one scheme joined into one batch (the answer is split back per frame by
:func:`app.engine.pipeline.verify_and_record_parts`).

A GPU launch, a CPU fan-out and a Merkle tree each cost the same whether a batch has 4
items or 4,000, so the ingest verify worker joins the frames it has at hand that share a
batch key (scheme, key length, context, options: what one :class:`Batch` carries) into
one batch, verifies it once, and answers each frame with its own slice of the verdicts
and the RFC 6962 root of its own leaves (a leaf depends only on its item, so the slice of
the joined batch's leaves is exactly the frame's leaves; docs/architecture.md, "Merkle leaf and receipts").

The joined columns are written into one buffer (a pool buffer when there is a pool, so a
GPU reads them in place): ``pks`` ``uint8[N, pk_len]``, ``sigs`` ``uint8[N, sig_len]``,
``offsets`` ``uint64[N + 1]`` and ``msgs``, each section starting at a multiple of 8.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from app.core.batch import Batch

#: (scheme id, pk_len, ctx, option bits): frames that may share one batch.
BatchKey = tuple[str, int, bytes, int]


def batch_key(batch: Batch) -> BatchKey:
    """The key under which ``batch`` may be joined with others."""
    return batch.scheme.id, int(batch.pks.shape[1]), bytes(batch.ctx), batch.options


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def joined_bytes(parts: Sequence[Batch]) -> int:
    """Bytes :func:`join` needs for ``parts`` (same key)."""
    n = sum(len(p) for p in parts)
    pk_len, sig_len = parts[0].pks.shape[1], parts[0].sigs.shape[1]
    msgs = sum(int(p.offsets[-1]) for p in parts)
    return _pad8(n * pk_len) + _pad8(n * sig_len) + 8 * (n + 1) + max(msgs, 1)


def join(parts: Sequence[Batch], alloc: Callable[[int], np.ndarray] | None = None) -> Batch:
    """One batch holding the items of ``parts`` in order (all with one :func:`batch_key`).

    ``alloc(nbytes)`` gives the writable ``uint8`` buffer the columns are copied into
    (default: fresh heap memory); the result's columns are views of it.

    Raises ``ValueError`` when the parts do not share a key or ``parts`` is empty.
    """
    if not parts:
        raise ValueError("nothing to join")
    key = batch_key(parts[0])
    if any(batch_key(p) != key for p in parts[1:]):
        raise ValueError("only batches with one scheme, key length, context and options can be joined")
    first = parts[0]
    n = sum(len(p) for p in parts)
    pk_len, sig_len = first.pks.shape[1], first.sigs.shape[1]
    lens = [int(p.offsets[-1]) for p in parts]
    size = joined_bytes(parts)
    buf = (alloc or (lambda k: np.empty(k, dtype=np.uint8)))(size)[:size]
    at_sigs = _pad8(n * pk_len)
    at_offs = at_sigs + _pad8(n * sig_len)
    at_msgs = at_offs + 8 * (n + 1)
    pks = buf[:n * pk_len].reshape(n, pk_len)
    sigs = buf[at_sigs:at_sigs + n * sig_len].reshape(n, sig_len)
    offsets = buf[at_offs:at_msgs].view(np.uint64)
    msgs = buf[at_msgs:at_msgs + sum(lens)]
    np.concatenate([p.pks for p in parts], out=pks)
    np.concatenate([p.sigs for p in parts], out=sigs)
    np.concatenate([p.msgs[:k] for p, k in zip(parts, lens)], out=msgs)
    offsets[0] = 0
    i = base = 0
    for p, k in zip(parts, lens):
        m = len(p)
        offsets[i + 1:i + m + 1] = p.offsets[1:].astype(np.uint64) + np.uint64(base)
        i, base = i + m, base + k
    return Batch(first.scheme, pks, sigs, msgs, offsets, first.ctx, first.prehashed, first.allow_high_s, first.low_s,
                 first.source)
