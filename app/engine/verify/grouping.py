"""Rows to batches: how a list of items becomes columnar batches of one scheme each.

Items share a batch when they share (scheme, key length, context, options), since a batch
carries one key length and one set of options (docs/architecture.md, "Batches and routing");
the options are every one of the registry's :data:`~app.core.schemes.OPTIONS`, as the item
sets them.  An item whose key or signature length fits no batch of its scheme, or whose
context is over 255 bytes, is ``False`` as given and never reaches a backend.  Used by the
engine and by ``scripts/gpu_check`` (so imports nothing beyond numpy and the registry).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from app.core.batch import Batch, Item
from app.core.schemes import MAX_CONTEXT_BYTES, OPTIONS, SCHEMES

#: (scheme id, public-key length, context, each option of OPTIONS in its order)
GroupKey = tuple[str, int, bytes, tuple[bool, ...]]

_NAMES = tuple(OPTIONS)
# An item's flags as a tuple in OPTIONS order.  attrgetter of two or more names gives that
# tuple in one C-level call, 8x faster than a generator here (grouping runs per item of a
# mixed JSON request); of one name it gives the bare value, so fewer names take the loop.
_option_values = attrgetter(*_NAMES) if len(_NAMES) > 1 else (lambda it: tuple(getattr(it, n) for n in _NAMES))


def group_items(items: Sequence[Item]) -> dict[GroupKey | None, list[int]]:
    """Indices of ``items`` per batch key; key None collects items that are false as given."""
    groups: dict[GroupKey | None, list[int]] = {}
    for i, it in enumerate(items):
        s = SCHEMES[it.scheme]
        key: GroupKey | None = (it.scheme, len(it.public_key), bytes(it.context), _option_values(it))
        if (len(it.public_key) not in s.pk_lens or len(it.signature) != s.sig_len
                or len(it.context) > MAX_CONTEXT_BYTES):
            key = None
        groups.setdefault(key, []).append(i)
    return groups


def batch_of(key: GroupKey, items: list[Item]) -> Batch:
    """The columnar batch of ``items``, which all have batch key ``key``."""
    scheme_id, _, ctx, flags = key
    return Batch.from_items(SCHEMES[scheme_id], [i.public_key for i in items], [i.message for i in items],
                            [i.signature for i in items], ctx=ctx, **dict(zip(_NAMES, flags)))
