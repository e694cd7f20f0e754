"""POST /v1/verify/bls-aggregate: BLS12-381 FastAggregateVerify / AggregateVerify items in,
verdicts and a Merkle root out, shaped like POST /v1/verify (docs/bls-aggregate.md)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Body, Request

from app.api.admission import ticket_of
from app.api.bls_aggregate import EXAMPLE, BlsAggregateRequest
from app.api.deps import EngineDep, SettingsDep, StoreDep
from app.api.schemas import ERROR_RESPONSES, VerifyResponse
from app.api.service import verify_bls_aggregate as verify_and_answer

router = APIRouter(prefix="/v1", tags=["verify"])


@router.post("/verify/bls-aggregate", response_model=VerifyResponse, responses=ERROR_RESPONSES)
async def verify_bls_aggregate(request: Request, engine: EngineDep, settings: SettingsDep, store: StoreDep,
                               req: BlsAggregateRequest = Body(openapi_examples={"fast_aggregate": {
                                   "summary": "three keys, one message", "value": EXAMPLE}})) -> VerifyResponse:
    """Verify BLS12-381 aggregate signatures (POP ciphersuite, as Ethereum uses it); verdicts
    in input order, the Merkle root over aggregate leaves, ``backends`` per mode.

    A bad key, signature, an identity key, no keys or ``messages`` of another count than
    ``public_keys`` is a `false` verdict; undecodable text or a limit exceeded is a 4xx
    naming `items[i].<field>`.  Receipts as for POST /v1/verify.
    """
    return await verify_and_answer(engine, store, settings, req, source="http", started=time.perf_counter(),
                                   ticket=ticket_of(request.scope))
