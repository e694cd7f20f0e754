"""POST /v1/verify/zap: a ZAP request frame in, a ZAP response frame out (docs/wire-format.md)."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from app.api.admission import ticket_of
from app.api.deps import RuntimeDep, ZapLimitsDep, media_type
from app.api.landing import GrowingLanding
from app.api.schemas import ErrorResponse
from app.api.service import is_zap, json_error_response, verify_frame, zap_error_of, zap_error_response
from app.core.errors import BadContentType, ZapVerifyError
from app.wire import zap
from app.wire.reader import FrameReader
from app.wire.zap import HEADER_SIZE

router = APIRouter(prefix="/v1", tags=["verify"])

_FRAME = {zap.CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}}}
ZAP_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": _FRAME, "description": "a verify response frame (type 0x02)"},
    400: {"content": _FRAME, "description": "an error frame (type 0x7F): the frame breaks ZAP v1"},
    413: {"content": _FRAME, "description": "an error frame: frame, item or message limit exceeded"},
    415: {"model": ErrorResponse, "content": _FRAME,
          "description": "Content-Type is not application/x-zap: an error frame, or the JSON error when the "
                         "request was JSON (Content-Type application/json; JSON requests go to POST /v1/verify)"},
    408: {"content": _FRAME, "description": "an error frame (BODY_TIMEOUT): the body stalled or came too slowly"},
    503: {"content": _FRAME, "description": "an error frame: over the admission bound (OVERLOADED), engine not ready, "
                                            "pool exhausted or receipt store down; Retry-After where a retry can help"},
}


def _is_json(content_type: str | None) -> bool:
    """Whether a Content-Type names JSON (``application/json`` or ``application/*+json``)."""
    kind = media_type(content_type)
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


@router.post("/verify/zap", response_class=Response, responses=ZAP_RESPONSES, openapi_extra={
    "requestBody": {"required": True, "content": _FRAME}})
async def verify_zap(request: Request, runtime: RuntimeDep, limits: ZapLimitsDep) -> Response:
    """Verify one ZAP request frame (`Content-Type: application/x-zap`).

    The body lands in a buffer of the UMA pool that grows with the bytes received (not
    with the `size` the header declares); the engine verifies the frame's columns where
    they lie.  Beyond the process's admission bound the answer is 503 `OVERLOADED` with
    `Retry-After`, sent before the body is read.  Every reply is a ZAP
    frame: a verify response (200) echoing `request_id`, with the verdicts and the Merkle
    root, or an error frame whose u16 code names what was wrong (4xx for a bad frame, 503
    while the engine is not ready or the pool or receipt store cannot serve).  When
    receipts are on, the receipt is written before the answer; its id is the
    `X-Zapverify-Batch-Id` header.
    """
    t0 = time.perf_counter()
    settings = runtime.settings
    engine = runtime.engine
    reader: FrameReader | None = None
    if not is_zap(request.headers.get("content-type")) and _is_json(request.headers.get("content-type")):
        # A JSON client cannot read an error frame: it gets its refusal in JSON.
        runtime.stats.record_frame("http", BadContentType.code.lower())
        return json_error_response(BadContentType(f"Content-Type must be {zap.CONTENT_TYPE}; JSON requests go to "
                                                  "POST /v1/verify", field="content-type"))
    try:
        if not is_zap(request.headers.get("content-type")):
            raise BadContentType(f"Content-Type must be {zap.CONTENT_TYPE}", field="content-type")
        length = request.headers.get("content-length")
        reader = FrameReader(limits, expected=int(length) if length and length.isdigit() else None)
        async with AsyncExitStack() as stack:
            grow: GrowingLanding | None = None
            async for received in request.stream():
                chunk: bytes | memoryview = received
                if grow is None:
                    chunk = reader.take_header(chunk)
                    if reader.header is None:
                        continue
                    # Pool memory follows the bytes that arrived, not the size the header declares.
                    grow = await stack.enter_async_context(
                        GrowingLanding(runtime.pool, reader.header.size, settings.zap_reserve_step_bytes))
                    first = await grow.room_for(HEADER_SIZE + len(chunk), 0)
                    assert first is not None  # the first call always lands a buffer
                    reader.attach(first, partial=True)
                elif (bigger := await grow.room_for(reader.filled + len(chunk), reader.filled)) is not None:
                    reader.rebind(bigger)
                reader.feed(chunk)
            _, buf = reader.finish()
            batch_id, body = await verify_frame(engine, runtime.store, buf, reader.limits, source="http",
                                                started=t0, ticket=ticket_of(request.scope))
        runtime.stats.record_frame("http", "accepted")
        return Response(body, media_type=zap.CONTENT_TYPE, headers={"X-Zapverify-Batch-Id": batch_id})
    except (ZapVerifyError, BaseExceptionGroup) as caught:
        # A middleware reading the body in a task group (BaseHTTPMiddleware) groups what its
        # receive raised (BodyDeadline's BodyTimeout, AdmissionControl's Overloaded).
        exc = zap_error_of(caught)
        if exc is None:
            raise
        runtime.stats.record_frame("http", exc.code.lower())  # the dashboard's and /metrics' ingest counters
        # Once the header's bytes are in the reply is addressed to its request_id, even when
        # the header itself is what was wrong.
        return zap_error_response(exc, reader.request_id if reader is not None else 0)
    except ClientDisconnect:
        # The client went away mid-upload: a counted outcome, not a server error.  Nobody
        # reads this answer; 499 is what it is logged and counted as (nginx's convention).
        runtime.stats.record_frame("http", "client_disconnected")
        return Response(status_code=499)
