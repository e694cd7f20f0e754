"""Rows to batches: how a list of items becomes columnar batches of one scheme each.

Items share a batch when they share (scheme, key length, context, prehashed,
allow_high_s), since a batch carries one key length and one set of options (docs/architecture.md,
"Batches and routing").  An item whose key or signature length fits no batch of its scheme, or whose
context is over 255 bytes, is ``False`` as given and never reaches a backend.  Used by the
engine and by ``scripts/gpu_check`` (so imports nothing beyond numpy and the registry).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.batch import Batch, Item
from app.core.schemes import MAX_CONTEXT_BYTES, SCHEMES

#: (scheme id, public-key length, context, prehashed, allow_high_s)
GroupKey = tuple[str, int, bytes, bool, bool]


def group_items(items: Sequence[Item]) -> dict[GroupKey | None, list[int]]:
    """Indices of ``items`` per batch key; key None collects items that are false as given."""
    groups: dict[GroupKey | None, list[int]] = {}
    for i, it in enumerate(items):
        s = SCHEMES[it.scheme]
        key: GroupKey | None = (it.scheme, len(it.public_key), bytes(it.context), it.prehashed, it.allow_high_s)
        if (len(it.public_key) not in s.pk_lens or len(it.signature) != s.sig_len
                or len(it.context) > MAX_CONTEXT_BYTES):
            key = None
        groups.setdefault(key, []).append(i)
    return groups


def batch_of(key: GroupKey, items: list[Item]) -> Batch:
    """The columnar batch of ``items``, which all have batch key ``key``."""
    scheme_id, _, ctx, prehashed, allow_high_s = key
    return Batch.from_items(SCHEMES[scheme_id], [i.public_key for i in items], [i.message for i in items],
                            [i.signature for i in items], ctx=ctx, prehashed=prehashed,
                            allow_high_s=allow_high_s)
