"""POST /v1/verify: a JSON batch of mixed schemes in, verdicts and a Merkle root out."""

from __future__ import annotations

import time

from fastapi import APIRouter, Body, Request

from app.api.admission import ticket_of
from app.api.deps import EngineDep, ItemLimit, RequireJson, SettingsDep, StoreDep
from app.api.schemas import ERROR_RESPONSES, VERIFY_EXAMPLES, VerifyRequest, VerifyResponse
from app.api.service import verify_json

router = APIRouter(prefix="/v1", tags=["verify"])


@router.post("/verify", response_model=VerifyResponse, responses=ERROR_RESPONSES,
             dependencies=[RequireJson, ItemLimit])
async def verify(request: Request, engine: EngineDep, settings: SettingsDep, store: StoreDep,
                 req: VerifyRequest = Body(openapi_examples=VERIFY_EXAMPLES)) -> VerifyResponse:
    """Verify every item; verdicts come back in input order.

    Items may mix schemes; each scheme is verified as one batch on the backend chosen for
    it.  A key or signature of the wrong length, a point off the curve or a bad encoding
    inside well-formed text is a `false` verdict; text that cannot be decoded, an unknown
    scheme or a limit exceeded is a 4xx naming `items[i].<field>`.  When receipts are on,
    the receipt (GET /v1/receipts/{batch_id}) is durably written before this answers; if it
    cannot be, the answer is 503 `STORE_UNAVAILABLE` and no verdicts.  Beyond the process's
    admission bound (items or bytes in flight) the answer is 503 `OVERLOADED` with
    `Retry-After`, sent before the body is read; a body that stalls is cut with 408.
    """
    return await verify_json(engine, store, settings, req, source="http", started=time.perf_counter(),
                             ticket=ticket_of(request.scope))
