"""What a backend's ``run`` returns for a batch (docs/architecture.md, "Backends"): the verdicts,
and the Merkle leaves and root where the backend made them, and which backend decided which
range of items.

One type for every backend and every kind of batch (columnar single-signature batches and
BLS aggregate batches alike), so the engine joins, checks and commits results one way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Span:
    """Items ``[start, stop)`` of a result, decided by ``backend`` (its ``name``)."""

    start: int
    stop: int
    backend: str


@dataclass
class Result:
    """The outcome of one batch of N items.

    Attributes:
        verdicts: ``bool[N]`` in item order.
        leaves: ``uint8[N, 32]`` Merkle leaf hashes in item order (docs/architecture.md,
            "Merkle leaf and receipts"), or None where the backend did not make them.
        root: the 32-byte RFC 6962 §2.1 root of ``leaves``, or None where the backend did
            not make it; never set without ``leaves``.
        spans: which backend decided which items, covering ``[0, N)`` in order.
    """

    verdicts: np.ndarray
    leaves: np.ndarray | None = None
    root: bytes | None = None
    spans: tuple[Span, ...] = ()

    @classmethod
    def of(cls, backend: str, verdicts: np.ndarray | Sequence[bool], leaves: np.ndarray | None = None,
           root: bytes | None = None) -> Result:
        """A result whose every item ``backend`` decided; ``verdicts`` become ``bool[N]``,
        ``leaves`` (if any) ``uint8[N, 32]``, ``root`` (if any) bytes.  Shapes are not
        checked here (a backend's answer is checked by :meth:`check`)."""
        v = np.asarray(verdicts, dtype=bool)
        lv = None if leaves is None else np.asarray(leaves, dtype=np.uint8)
        n = int(v.shape[0]) if v.ndim == 1 else 0
        return cls(v, lv, None if root is None else bytes(root), (Span(0, n, backend),))

    def __len__(self) -> int:
        return int(self.verdicts.shape[0])

    @property
    def valid(self) -> int:
        """How many verdicts are True."""
        return int(np.count_nonzero(self.verdicts))

    @property
    def backend(self) -> str:
        """The backends that decided these items, joined by ``+`` in order of first use
        (``"cuda"``, ``"cuda+cpu"``)."""
        return "+".join(dict.fromkeys(s.backend for s in self.spans))

    def check(self, n: int) -> Result:
        """This result, after checking it answers a batch of ``n`` items: ``bool[n]``
        verdicts, ``uint8[n, 32]`` leaves if any, a 32-byte root if any (only with leaves).

        Raises:
            ValueError: a part of the wrong shape (a broken backend: the engine re-runs the
                batch on the CPU).
        """
        if self.verdicts.shape != (n,):
            raise ValueError(f"returned verdicts of shape {self.verdicts.shape}, expected ({n},)")
        if self.leaves is not None and self.leaves.shape != (n, 32):
            raise ValueError(f"returned leaves of shape {self.leaves.shape}, expected ({n}, 32)")
        if self.root is not None and (len(self.root) != 32 or self.leaves is None):
            raise ValueError("returned a root that is not 32 bytes, or a root without leaves")
        return self

    @classmethod
    def join(cls, parts: Sequence[Result]) -> Result:
        """Consecutive results as one, in order: verdicts and spans joined (spans shifted to
        their place), leaves joined where every part has them, no root (a root covers one
        tree; the commit step builds the joined one)."""
        spans: list[Span] = []
        at = 0
        for p in parts:
            spans.extend(Span(s.start + at, s.stop + at, s.backend) for s in p.spans)
            at += len(p)
        verdicts = np.concatenate([p.verdicts for p in parts]) if parts else np.zeros(0, dtype=bool)
        have = all(p.leaves is not None for p in parts)
        leaves = np.concatenate([p.leaves for p in parts if p.leaves is not None]) if have and parts else None
        return cls(verdicts, leaves, None, tuple(spans))
