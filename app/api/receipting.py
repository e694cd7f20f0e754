"""The receipt of a verified batch, written before any transport answers (DESIGN.md section 5)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
from starlette.concurrency import run_in_threadpool

from app.engine.store import Receipt, ReceiptStore


async def record(store: ReceiptStore | None, *, batch_id: str, verdicts: np.ndarray, leaves: np.ndarray,
                 root: bytes, schemes: Sequence[str], backends: Mapping[str, str], started: float,
                 source: str) -> None:
    """Durably write the receipt of one answered batch; nothing when receipts are off (``store`` None).

    ``started`` is the ``time.perf_counter()`` of the batch's arrival; ``source`` one of
    :data:`app.engine.store.SOURCES`.  Raises :class:`app.errors.StoreUnavailable` (503):
    the caller must then withhold the verdicts.
    """
    if store is None:
        return
    receipt = Receipt.build(id=batch_id, verdicts=verdicts, leaves=leaves, merkle_root=root, schemes=schemes,
                            backends=backends, duration_seconds=time.perf_counter() - started, source=source)
    await run_in_threadpool(store.put, receipt)
