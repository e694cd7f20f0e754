"""POST /v1/verify/zap: a ZAP request frame in, a ZAP response frame out (docs/wire-format.md)."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.deps import get_store, zap_limits
from app.api.landing import landing
from app.api.service import is_zap, verify_frame, zap_error_response
from app.errors import BadContentType, ZapVerifyError
from app.wire import zap

router = APIRouter(prefix="/v1", tags=["verify"])

_FRAME = {zap.CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}}}
ZAP_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": _FRAME, "description": "a verify response frame (type 0x02)"},
    400: {"content": _FRAME, "description": "an error frame (type 0x7F): the frame breaks ZAP v1"},
    413: {"content": _FRAME, "description": "an error frame: frame, item or message limit exceeded"},
    415: {"content": _FRAME, "description": "an error frame: Content-Type is not application/x-zap"},
    503: {"content": _FRAME, "description": "an error frame: engine not ready, pool exhausted or receipt store down"},
}


@router.post("/verify/zap", response_class=Response, responses=ZAP_RESPONSES, openapi_extra={
    "requestBody": {"required": True, "content": _FRAME}})
async def verify_zap(request: Request) -> Response:
    """Verify one ZAP request frame (`Content-Type: application/x-zap`).

    The body is read once, into one buffer of the frame's declared `size` taken from the
    UMA pool; the engine verifies the frame's columns where they lie.  Every reply is a ZAP
    frame: a verify response (200) echoing `request_id`, with the verdicts and the Merkle
    root, or an error frame whose u16 code names what was wrong (4xx for a bad frame, 503
    while the engine is not ready or the pool or receipt store cannot serve).  When
    receipts are on, the receipt is written before the answer; its id is the
    `X-Zapverify-Batch-Id` header.
    """
    t0 = time.perf_counter()
    settings = request.app.state.settings
    engine = request.app.state.engine
    reader: zap.FrameReader | None = None
    try:
        if not is_zap(request.headers.get("content-type")):
            raise BadContentType(f"Content-Type must be {zap.CONTENT_TYPE}", field="content-type")
        length = request.headers.get("content-length")
        reader = zap.FrameReader(zap_limits(settings), expected=int(length) if length and length.isdigit() else None)
        async with AsyncExitStack() as stack:
            async for received in request.stream():
                chunk: bytes | memoryview = received
                if reader.header is None:
                    chunk = reader.take_header(chunk)
                    if reader.header is None:
                        continue
                    reader.attach(await stack.enter_async_context(landing(engine, reader.header.size)))
                reader.feed(chunk)
            _, buf = reader.finish()
            batch_id, body = await verify_frame(engine, get_store(request), buf, reader.limits, source="http",
                                                started=t0)
        engine.stats.record_frame("http", "accepted")
        return Response(body, media_type=zap.CONTENT_TYPE, headers={"X-Zapverify-Batch-Id": batch_id})
    except ZapVerifyError as exc:
        engine.stats.record_frame("http", exc.code.lower())  # the dashboard's and /metrics' ingest counters
        # Once the header has been read the reply is addressed to its request_id.
        header = reader.header if reader is not None else None
        return zap_error_response(exc, header.request_id if header is not None else 0)
