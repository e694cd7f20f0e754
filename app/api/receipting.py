"""The receipt of a verified batch, written before any transport answers (DESIGN.md section 5)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
from starlette.concurrency import run_in_threadpool

from app.engine.receipts.store import Receipt, ReceiptStore
from app.engine.stats import RecentRequest, Stats


async def record(store: ReceiptStore | None, *, batch_id: str, verdicts: np.ndarray, leaves: np.ndarray,
                 root: bytes, schemes: Sequence[str], backends: Mapping[str, str], started: float,
                 source: str, stats: Stats | None = None) -> None:
    """Durably write the receipt of one answered batch; nothing when receipts are off (``store`` None).

    ``started`` is the ``time.perf_counter()`` of the batch's arrival; ``source`` one of
    :data:`app.engine.receipts.store.SOURCES`; ``schemes`` the scheme of each item, or the one scheme
    of a single-scheme batch.  Raises :class:`app.errors.StoreUnavailable` (503): the caller
    must then withhold the verdicts.  Once written (or with receipts off), the batch is
    listed in ``stats``' recent requests (the dashboard's list), when given.
    """
    if store is not None:
        receipt = Receipt.build(id=batch_id, verdicts=verdicts, leaves=leaves, merkle_root=root, schemes=schemes,
                                backends=backends, duration_seconds=time.perf_counter() - started, source=source)
        await run_in_threadpool(store.put, receipt)
    if stats is not None:
        n = len(verdicts)
        per_scheme = dict(Counter(schemes)) if len(schemes) == n else {s: n for s in set(schemes)}
        stats.record_request(RecentRequest(
            batch_id=batch_id, time=time.time(), count=n, valid=int(np.count_nonzero(verdicts)), schemes=per_scheme,
            backends=dict(backends), elapsed_ms=round((time.perf_counter() - started) * 1000, 3), source=source,
            receipt=f"/v1/receipts/{batch_id}" if store is not None else None))
