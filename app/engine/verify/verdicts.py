"""What one engine call returns (:meth:`app.engine.verify.engine.Engine.run`), whatever it was
given: verdicts committed to a Merkle tree, and which backend decided which items
(docs/architecture.md, "Merkle leaf and receipts").

One type serves a columnar batch, a mixed list of items and a list of BLS aggregate items, so
a caller (the pipeline, the CLI, a benchmark) never asks which kind it got back.

This module imports no web framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core.batch import AggregateItem, Batch, Item
from app.engine.verify.shadow import ShadowTicket

#: What the engine verifies: one columnar batch (ZAP, ingest), a mixed list of items (JSON), or
#: a list of BLS aggregate items (docs/bls-aggregate.md).  A list is all of one kind.
Work = Batch | Sequence[Item] | Sequence[AggregateItem]

#: Backend name under which items refused before any backend (wrong key, signature or
#: context length) are counted: they are ``False`` verdicts all the same.
PRECHECK = "precheck"


@dataclass
class Committed:
    """Verdicts committed to a Merkle tree.

    Attributes:
        verdicts: ``bool[N]`` in item order.
        leaves: ``uint8[N, 32]`` Merkle leaf hashes.
        root: the 32-byte RFC 6962 root of ``leaves``.
        verify_seconds / merkle_seconds: wall time of each phase, seconds.
        backends: scheme id (or aggregate label, :data:`app.core.batch.AGGREGATE_LABELS`) →
            the backend(s) that decided its items (``"cpu"``, ``"cuda+cpu"``, ``"precheck"``).
        schemes: the scheme id or aggregate label of each item, or one entry when every item
            is of one scheme (a columnar batch); the receipt's ``schemes``.
        shadow: the shadow checks of these verdicts; :meth:`ShadowTicket.bind` it to the
            receipt (app/engine/pipeline.py) so a mismatch found later is recorded there.
        merkle_backend: the backend that made the root (``cpu`` unless a device committed it).
    """

    verdicts: np.ndarray
    leaves: np.ndarray
    root: bytes
    verify_seconds: float
    merkle_seconds: float
    backends: dict[str, str]
    schemes: list[str]
    shadow: ShadowTicket | None = None
    merkle_backend: str = "cpu"

    @property
    def valid(self) -> int:
        return int(np.count_nonzero(self.verdicts))

    @property
    def backend(self) -> str:
        """The backend(s) that decided the items, joined by ``+`` in first-use order (for a
        columnar batch, of one scheme: the one value of :attr:`backends`)."""
        names = [n for v in self.backends.values() for n in v.split("+")]
        return "+".join(dict.fromkeys(names))


def note_backend(backends: dict[str, str], scheme_id: str, name: str) -> None:
    """Add ``name`` to what decided ``scheme_id``'s items ("cpu", "cuda+cpu", "precheck", ...)."""
    prev = backends.get(scheme_id)
    if prev is None:
        backends[scheme_id] = name
    elif name not in prev.split("+"):
        backends[scheme_id] = f"{prev}+{name}"
