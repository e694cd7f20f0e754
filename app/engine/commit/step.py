"""The commit step: the one place a verified batch gets its Merkle leaves and root
(docs/architecture.md, "Merkle leaf and receipts").

A backend's :class:`app.core.result.Result` may already carry the leaves (the CPU hashes them
beside the verdicts) or the leaves and root (a device's Merkle kernels); this step makes only
what is missing, with the fast hasher it was given (the CPU backend's native loops) or with
hashlib.  The engine runs every kind of work through it (a columnar batch, a mixed list of
items, BLS aggregate items) and the pipeline the roots of joined requests' parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from app.core.batch import AggregateBatch, Batch, Item
from app.core.result import Result
from app.core.schemes import SCHEMES
from app.engine.commit import merkle

#: What can be committed: a columnar batch, a list of items, or BLS aggregate items.
Committable = Batch | Sequence[Item] | AggregateBatch


def _no_hasher() -> merkle.LeafHasher | None:
    return None


class CommitStep:
    """Completes results with leaves and roots.

    Args:
        hasher: returns the :class:`app.engine.commit.merkle.LeafHasher` to use now, or None
            for hashlib (asked at each call: the CPU backend loads its native loops at
            warm-up, after the engine is built).
    """

    def __init__(self, hasher: Callable[[], merkle.LeafHasher | None] = _no_hasher):
        self._hasher = hasher

    def leaves(self, work: Committable, verdicts: np.ndarray) -> np.ndarray:
        """``uint8[N, 32]`` leaf hashes of ``work`` under ``verdicts`` (``bool[N]``): a batch's
        and items' leaves as :func:`app.engine.commit.merkle.leaf_hash`, aggregate items' as
        :func:`app.engine.commit.merkle.aggregate_leaf`."""
        n = len(work)
        if isinstance(work, Batch):
            return merkle.batch_leaves(work, verdicts, self._hasher())
        if isinstance(work, AggregateBatch):
            rows = [merkle.aggregate_leaf(it, bool(v)) for it, v in zip(work.items, verdicts)]
        else:
            rows = [merkle.leaf_hash(SCHEMES[it.scheme].code, bool(v), it.public_key, it.message, it.signature)
                    for it, v in zip(work, verdicts)]
        return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(n, 32)

    def with_leaves(self, work: Committable, result: Result) -> Result:
        """``result`` with its leaves, made here where it has none."""
        if result.leaves is not None:
            return result
        return replace(result, leaves=self.leaves(work, result.verdicts), root=None)

    def root(self, leaves: np.ndarray) -> bytes:
        """The RFC 6962 §2.1 root of ``uint8[N, 32]`` leaves, 32 bytes."""
        return merkle.root(leaves, self._hasher())

    def __call__(self, work: Committable, result: Result) -> Result:
        """``result`` of ``work`` with leaves and root, each made here where missing."""
        done = self.with_leaves(work, result)
        if done.root is not None:
            return done
        assert done.leaves is not None  # with_leaves made them
        return replace(done, root=self.root(done.leaves))
