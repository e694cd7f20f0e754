"""The one path every batch takes, whatever carried it: verify → commit → receipt →
dashboard record → result (docs/architecture.md, "Pipeline").

HTTP JSON, HTTP ZAP, WebSocket (JSON and ZAP), TCP, UDP and QUIC all call
:func:`verify_and_record` (or, for frames the ingest worker joined into one batch,
:func:`verify_and_record_parts`), so every transport's batches get the same receipts and
appear in the dashboard's recent batches with their ``source``.

Shadow mismatches (docs/architecture.md, "Shadow verification"): the engine's result carries
a :class:`~app.engine.verify.shadow.ShadowTicket`; once the receipts are written it is bound
to them, so a mismatch the async checker finds later (or found already) is recorded on the
receipt of the part that answered the item, at that item's index in it.

Blocking: call it from a worker thread (the HTTP routes use ``run_in_threadpool``; the
ingest worker is a thread).  The receipt is written before anything is answered: when it
cannot be, :class:`app.core.errors.StoreUnavailable` is raised and the caller must withhold
the verdicts.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.core.context import REQUEST_ID
from app.engine.commit import merkle
from app.engine.receipts.ids import new_batch_id
from app.engine.receipts.store import Receipt, ReceiptStore
from app.engine.stats import RecentRequest
from app.engine.verify.engine import Engine
from app.engine.verify.shadow import Found, ShadowTicket
from app.engine.verify.verdicts import Work

log = logging.getLogger("zapverify.pipeline")

@dataclass(frozen=True)
class Part:
    """One request's share of the work: its ``count`` items (following the previous part's),
    when it arrived (``time.perf_counter()``) and the transport it came on
    (:data:`app.engine.receipts.store.SOURCES`; its receipt's and dashboard entry's ``source``)."""

    count: int
    started: float
    source: str


@dataclass
class Recorded:
    """One request verified, committed and recorded.

    Attributes:
        batch_id: UUIDv7; the receipt's id when receipts are on.
        verdicts: ``bool[N]`` in item order.
        leaves: ``uint8[N, 32]`` Merkle leaf hashes.
        root: the 32-byte RFC 6962 root of ``leaves``.
        backends: scheme id → backend that verified it.
        verify_seconds / merkle_seconds: the engine's time in each phase (of the whole
            joined batch, for a part of one).
    """

    batch_id: str
    verdicts: np.ndarray
    leaves: np.ndarray
    root: bytes
    backends: dict[str, str]
    verify_seconds: float
    merkle_seconds: float

    @property
    def valid(self) -> int:
        return int(np.count_nonzero(self.verdicts))


def verify_and_record(engine: Engine, store: ReceiptStore | None, work: Work, *, source: str,
                      started: float) -> Recorded:
    """Verify ``work``, commit it, write its receipt (when ``store`` is not None), list it in
    the dashboard's recent batches, and return the result.

    ``source``: the transport (:data:`app.engine.receipts.store.SOURCES`); ``started``: the
    ``time.perf_counter()`` of its arrival.  Raises :class:`app.core.errors.NotReady` before the
    engine's self-test passed, the :class:`app.core.errors.RequestError` of an empty or
    malformed batch, and :class:`app.core.errors.StoreUnavailable` when the receipt cannot be
    written.
    """
    return verify_and_record_parts(engine, store, work, [Part(len(work), started, source)])[0]


def verify_and_record_parts(engine: Engine, store: ReceiptStore | None, work: Work, parts: Sequence[Part], *,
                            verified: Callable[[], None] | None = None) -> list[Recorded]:
    """:func:`verify_and_record` for ``work`` that joins several requests (``parts``, in
    order, their counts adding up to ``len(work)``): verified once, then each part gets its
    own verdicts, leaves, RFC 6962 root (a leaf depends only on its item, so a part's slice
    of the leaves is exactly its own tree's leaves), receipt and dashboard entry.  The
    receipts of all parts are written in one transaction, before any part is returned.

    ``verified`` is called between verification and the receipt write (the ingest worker
    passes its buffers to their next owner there).  Errors as :func:`verify_and_record`;
    a failed receipt write fails every part.  The two halves are :func:`verify_parts` and
    :func:`record`, for a caller that records in another thread (the ingest worker).
    """
    pending = verify_parts(engine, work, parts)
    if verified is not None:
        verified()
    return record(engine, store, pending)


@dataclass
class Verified:
    """Parts verified and committed, not yet recorded (:func:`verify_parts` → :func:`record`)."""

    parts: list[tuple[Part, Recorded, list[str]]]
    #: The shadow checks of the whole work (its indices run over every part in order).
    shadow: ShadowTicket | None = None


def verify_parts(engine: Engine, work: Work, parts: Sequence[Part]) -> Verified:
    """The first half of :func:`verify_and_record_parts`: verify and commit ``work``, split
    per part.  Raises as :func:`verify_and_record` does, except for the receipt."""
    if sum(p.count for p in parts) != len(work):
        raise ValueError(f"parts cover {sum(p.count for p in parts)} items, the work has {len(work)}")
    engine.require_ready()
    result = engine.run(work)
    backends, schemes = result.backends, result.schemes
    done = []
    lo = 0
    for part in parts:
        hi = lo + part.count
        v, lv = result.verdicts[lo:hi], result.leaves[lo:hi]
        root = result.root if len(parts) == 1 else merkle.root(lv)
        part_schemes = schemes if len(schemes) == 1 else schemes[lo:hi]
        done.append((part, Recorded(new_batch_id(), v, lv, root, dict(backends), result.verify_seconds,
                                    result.merkle_seconds), part_schemes))
        lo = hi
    return Verified(done, result.shadow)


def record(engine: Engine, store: ReceiptStore | None, verified: Verified) -> list[Recorded]:
    """The second half of :func:`verify_and_record_parts`: the receipts of every part in one
    transaction (joined with other threads' by the store's group commit), then the
    dashboard entries.  Raises :class:`app.core.errors.StoreUnavailable` when the receipts cannot
    be written; nothing of ``verified`` may be answered then."""
    done = verified.parts
    if store is not None:
        now = time.perf_counter()
        store.put_many([Receipt.build(id=r.batch_id, verdicts=r.verdicts, leaves=r.leaves, merkle_root=r.root,
                                      schemes=s, backends=r.backends, duration_seconds=now - part.started,
                                      source=part.source, request_id=REQUEST_ID.get())
                        for part, r, s in done])
    if verified.shadow is not None:
        verified.shadow.bind(_shadow_sink(store, [(p.count, r.batch_id) for p, r, _ in done]))
    for part, r, s in done:
        n = len(r.verdicts)
        per_scheme = dict(Counter(s)) if len(s) == n else {sid: n for sid in set(s)}
        engine.stats.record_request(RecentRequest(
            batch_id=r.batch_id, time=time.time(), count=n, valid=r.valid, schemes=per_scheme,
            backends=dict(r.backends), elapsed_ms=round((time.perf_counter() - part.started) * 1000, 3),
            source=part.source, receipt=f"/v1/receipts/{r.batch_id}" if store is not None else None))
    return [r for _, r, _ in done]


def _shadow_sink(store: ReceiptStore | None, parts: list[tuple[int, str]]):
    """What a bound :class:`ShadowTicket` calls with mismatches: each is given the batch id
    and item index of the part (``parts``: (items, batch id) in order) that answered it,
    and one the answer carried (not ``corrected``) is recorded on that receipt."""
    starts, lo = [], 0
    for count, _ in parts:
        starts.append(lo)
        lo += count

    def sink(found: list[Found]) -> None:
        wrong: dict[str, list[int]] = {}
        for where, m in found:
            k = bisect.bisect_right(starts, where) - 1
            m.batch_id, m.item = parts[k][1], where - starts[k]
            if not m.corrected:
                wrong.setdefault(m.batch_id, []).append(m.item)
        for batch_id, items in wrong.items():
            log.error("batch %s: a shadow check found the answered verdicts of items %s wrong (among the items it "
                      "sampled; the others were not checked)%s", batch_id, sorted(items),
                      "; recorded on its receipt" if store is not None else " (receipts are off)")
            if store is not None:
                store.add_shadow_mismatches(batch_id, items)

    return sink
