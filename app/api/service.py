"""What the verify routes share (HTTP JSON, HTTP ZAP, WebSocket): a request in, through
:func:`app.engine.pipeline.verify_and_record`, an answer out.  Routes import this module,
never each other."""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from app.api.bls_aggregate import BlsAggregateRequest, to_aggregate_items
from app.api.deps import media_type
from app.api.schemas import VerifyRequest, VerifyResponse, to_work
from app.config import Settings
from app.core.batch import AggregateItem
from app.core.errors import ZapVerifyError
from app.engine.admission import PAIRINGS
from app.engine.pipeline import Recorded, verify_and_record
from app.engine.receipts.store import ReceiptStore
from app.engine.verify.engine import Engine

if TYPE_CHECKING:
    from app.engine.admission import Ticket
from app.wire import zap


def is_zap(content_type: str | None) -> bool:
    """True when a Content-Type header names ``application/x-zap`` (parameters ignored)."""
    return media_type(content_type) == zap.CONTENT_TYPE


def zap_error_of(exc: BaseException) -> ZapVerifyError | None:
    """``exc`` itself, or the first :class:`ZapVerifyError` inside an exception group (a
    middleware's task group wraps what was raised in it), else None."""
    if isinstance(exc, ZapVerifyError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := zap_error_of(inner)) is not None:
                return found
    return None


def error_headers(exc: ZapVerifyError) -> dict[str, str]:
    """HTTP headers an error answer carries: ``Retry-After`` (whole seconds, at least 1) for
    an error that a retry can cure (overload, pool exhausted, not ready, rate limited), and
    ``Connection: close`` for a stalled body, whose unread rest must not be taken for the
    next request."""
    headers = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    if exc.status == 408:
        headers["Connection"] = "close"
    return headers


def zap_error_response(exc: ZapVerifyError, request_id: int = 0) -> Response:
    """``exc`` as a ZAP error frame with its HTTP status (and :func:`error_headers`)."""
    return Response(bytes(zap.error_frame(exc, request_id)), status_code=exc.status, media_type=zap.CONTENT_TYPE,
                    headers=error_headers(exc))


def json_error_response(exc: ZapVerifyError) -> JSONResponse:
    """``exc`` as the JSON error shape ``{"error": {code, message, field}}`` with its HTTP status."""
    return JSONResponse({"error": exc.to_dict()}, status_code=exc.status, headers=error_headers(exc))


def error_response(exc: ZapVerifyError, *, zap_body: bool, request_id: int = 0) -> Response:
    """``exc`` answered in the request's own format: a ZAP error frame or the JSON error."""
    return zap_error_response(exc, request_id) if zap_body else json_error_response(exc)


async def verify_frame(engine: Engine, store: ReceiptStore | None, buf: np.ndarray, limits: zap.Limits, *,
                       source: str, started: float, ticket: Ticket | None = None) -> tuple[str, bytes]:
    """Decode the request frame in ``buf`` (``uint8``, pool memory, read in place), verify and
    record it; returns (batch id, response frame).  ``ticket``: the request's admission
    charge, charged the frame's items before they are verified.  Raises the
    :class:`ZapVerifyError` of a bad frame, a not-ready engine, an overload
    (:class:`app.core.errors.Overloaded`) or a failed receipt write."""
    frame = zap.decode_request(buf, limits)
    if ticket is not None:
        ticket.add_items({frame.batch.scheme.id: len(frame.batch)})
    rec = await run_in_threadpool(verify_and_record, engine, store, frame.batch, source=source, started=started)
    batch_id = uuid.UUID(rec.batch_id).bytes if frame.want_batch_id else None
    return rec.batch_id, bytes(zap.encode_response(frame.request_id, rec.verdicts, rec.root, batch_id))


async def verify_json(engine: Engine, store: ReceiptStore | None, settings: Settings, req: VerifyRequest, *,
                      source: str, started: float, ticket: Ticket | None = None) -> VerifyResponse:
    """Verify and record the items of a JSON request; the JSON answer.  ``ticket``: the
    request's admission charge, charged its items before they are decoded.  Raises the 4xx
    :class:`ZapVerifyError` naming ``items[i].<field>`` for items that cannot be decoded or a
    limit exceeded, :class:`app.core.errors.NotReady`, :class:`app.core.errors.Overloaded` and
    :class:`app.core.errors.StoreUnavailable`."""
    engine.require_ready()
    if ticket is not None:
        ticket.add_items(Counter(item.scheme for item in req.items))
    work = to_work(req, max_items=settings.max_items, max_message_bytes=settings.max_message_bytes)
    rec = await run_in_threadpool(verify_and_record, engine, store, work, source=source, started=started)
    return _answer(rec, started)


async def verify_bls_aggregate(engine: Engine, store: ReceiptStore | None, settings: Settings,
                               req: BlsAggregateRequest, *, source: str, started: float,
                               ticket: Ticket | None = None) -> VerifyResponse:
    """:func:`verify_json` for a BLS aggregate request (docs/bls-aggregate.md); errors alike,
    the limits those of :func:`app.api.bls_aggregate.to_aggregate_items`."""
    engine.require_ready()
    items = to_aggregate_items(req, settings)
    units = aggregate_units(items)
    if ticket is not None:
        ticket.add_items({PAIRINGS: units})
    rec = await run_in_threadpool(verify_and_record, engine, store, items, source=source, started=started)
    if ticket is not None:  # the cost model learns aggregates per pairing, not per item
        ticket.admission.rates.observe(PAIRINGS, units, rec.verify_seconds, marginal=False)
    return _answer(rec, started)


def aggregate_units(items: Sequence[AggregateItem]) -> int:
    """The cost of BLS aggregate items in admission's unit (:data:`app.engine.admission.PAIRINGS`):
    Σ (keys + distinct messages + 1) — a key's share of the aggregate, a message's hash to G2
    and pairing, and the signature's pairing."""
    return sum(len(it.public_keys) + len(set(it.messages)) + 1 for it in items)


def _answer(rec: Recorded, started: float) -> VerifyResponse:
    n = int(rec.verdicts.shape[0])
    return VerifyResponse(
        batch_id=rec.batch_id, count=n, valid=rec.valid, invalid=n - rec.valid, verdicts=rec.verdicts.tolist(),
        merkle_root=rec.root.hex(), backends=rec.backends,
        elapsed_ms=round((time.perf_counter() - started) * 1000, 3), verify_ms=round(rec.verify_seconds * 1000, 3),
        merkle_ms=round(rec.merkle_seconds * 1000, 3))
