"""Receipts over HTTP: read a receipt, page through them, fetch an item's inclusion proof.

``GET /v1/receipts/{id}``                 one receipt (without leaf hashes)
``GET /v1/receipts?order=&after=&limit=`` keyset paging, oldest first (``order=asc``, the
                                          default) or newest first (``order=desc``);
                                          ``next_after`` is the cursor of the next page in that
                                          order (``null`` on the last)
``GET /v1/receipts/{id}/proof/{index}``   RFC 6962 §2.1.1 audit path of item ``index``

The store is the runtime's (``StoreDep`` of :mod:`app.api.deps`, a
:class:`app.engine.receipts.store.ReceiptStore`, or ``None`` when receipts are off).  Errors: 404 ``RECEIPT_NOT_FOUND``,
``LEAF_INDEX_OUT_OF_RANGE``, ``RECEIPTS_DISABLED``; 422 ``BAD_REQUEST`` for an id that is
not a UUID; 503 ``STORE_UNAVAILABLE``.  Store calls block, so the handlers are plain
functions, which FastAPI runs in its thread pool, except the proof's, which answers from a
kept tree on the event loop and sends only its store calls to the thread pool.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from app.api.admission import proof_ticket
from app.api.deps import AdmissionDep, StoreDep
from app.api.schemas import UUID_PATTERN, ErrorResponse
from app.core.errors import ReceiptNotFound, ReceiptsDisabled
from app.engine.admission import PROOFS
from app.engine.commit.proofs import ProofTree
from app.engine.receipts import proof_cache
from app.engine.receipts.store import MAX_PAGE, ReceiptStore, canonical_id

_UUID_SCHEMA = {"format": "uuid"}

router = APIRouter(prefix="/v1/receipts", tags=["receipts"], responses={
    404: {"model": ErrorResponse, "description": "RECEIPT_NOT_FOUND, LEAF_INDEX_OUT_OF_RANGE, or "
                                                 "RECEIPTS_DISABLED (receipts are off on this server)"},
    422: {"model": ErrorResponse, "description": "a parameter is not of its type; `field` names it"},
    503: {"model": ErrorResponse, "description": "STORE_UNAVAILABLE: the receipt store cannot be read"},
})

ReceiptId = Annotated[str, Path(pattern=UUID_PATTERN, json_schema_extra=_UUID_SCHEMA,
                                 description="the batch id (a UUID)")]


class ReceiptOut(BaseModel):
    id: str = Field(description="UUIDv7 batch id; ids sort by creation time")
    created_at: str = Field(description="RFC 3339 UTC time, microseconds")
    schemes: list[str]
    count: int = Field(description="items in the batch")
    valid: int = Field(description="items whose verdict is true")
    merkle_root: str = Field(description="RFC 6962 root, hex")
    verdict_bitmap: str = Field(description="hex; item i is bit i % 8 (least significant first) of byte i // 8")
    backends: dict[str, str] = Field(description="scheme id -> backend that ran it")
    duration_seconds: float
    source: str = Field(description="http, ws, tcp, udp or quic")
    shadow_mismatches: list[int] = Field(default_factory=list, description=(
        "indices of items whose verdict here a shadow check (the CPU reference re-verifying a sample of an "
        "accelerated backend's verdicts) found wrong after it was answered: the right verdict is the opposite; "
        "empty when none. May grow after the receipt is written (docs/architecture.md, \"Shadow verification\")"))
    shadow_mismatches_note: str | None = Field(None, description=(
        "null when shadow_mismatches is empty; else says that the list is what a sample found: items the shadow "
        "check did not sample were not checked and may be wrong too"))
    request_id: str | None = Field(None, description=(
        "the X-Request-ID of the request that carried the batch (the client's, or one the server made and "
        "answered in that header); null for ingest frames and receipts written before it was recorded"))


class ReceiptPage(BaseModel):
    receipts: list[ReceiptOut]
    next_after: str | None = Field(description="pass as ?after= (with the same order) for the next page; null when "
                                               "this is the last")


class ProofOut(BaseModel):
    receipt_id: str
    index: int
    count: int
    verdict: bool
    leaf_hash: str = Field(description="hex of SHA-256(0x00 ‖ code ‖ verdict ‖ H(pk) ‖ H(msg) ‖ H(sig))")
    audit_path: list[str] = Field(description="RFC 6962 §2.1.1 sibling hashes, leaf to root, hex")
    merkle_root: str


def enabled(store: ReceiptStore | None) -> ReceiptStore:
    """The app's receipt store; raises :class:`ReceiptsDisabled` when receipts are off."""
    if store is None:
        raise ReceiptsDisabled("receipts are off on this server (ZAPVERIFY_RECEIPTS=false)")
    return store


@router.get("", response_model=ReceiptPage, summary="Page through receipts, oldest or newest first")
def list_receipts(store: StoreDep,
                  after: Annotated[str | None, Query(pattern=UUID_PATTERN, json_schema_extra=_UUID_SCHEMA,
                                                     description="id of the last receipt of the previous page "
                                                                 "(its next_after): this page continues past it "
                                                                 "in the same order")] = None,
                  limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                  order: Annotated[Literal["asc", "desc"], Query(
                      description="asc: oldest first; desc: newest first (order=desc&limit=1 is the newest "
                                  "receipt)")] = "asc") -> dict:
    """Receipts without their leaf hashes, in creation order (ids are UUIDv7s, so id order).
    A page of ``limit`` has ``next_after``; pass it as ``after`` with the same ``order`` for the
    next one.  Receipts written while paging ascending show up on later pages; descending,
    only on a new walk from the top."""
    store = enabled(store)
    cursor = None if after is None else canonical_id(after, "after")
    receipts = store.page(cursor, limit, order=order)
    return {"receipts": [r.to_json() for r in receipts],
            "next_after": receipts[-1].id if len(receipts) == limit else None}


@router.get("/{receipt_id}", response_model=ReceiptOut, summary="One receipt")
def get_receipt(store: StoreDep, receipt_id: ReceiptId) -> dict:
    store = enabled(store)
    rid = canonical_id(receipt_id, "receipt_id")
    receipt = store.get(rid, leaves=False)
    if receipt is None:
        raise ReceiptNotFound(f"no receipt {rid}", field="receipt_id")
    return receipt.to_json()


@router.get("/{receipt_id}/proof/{index}", response_model=ProofOut,
            summary="Inclusion proof of one item (RFC 6962 §2.1.1)")
async def get_proof(request: Request, store: StoreDep, admission: AdmissionDep, receipt_id: ReceiptId,
                    index: Annotated[int, Path(description="the item's position in the batch; outside [0, count) "
                                                           "is a 404 LEAF_INDEX_OUT_OF_RANGE")]) -> dict:
    store = enabled(store)
    rid = canonical_id(receipt_id, "receipt_id")
    # A proof read is charged like verify work (admitted at once; refused only at a bound).
    ticket = proof_ticket(admission, request.scope)
    t0 = time.perf_counter()
    try:
        ticket.add_items({PROOFS: 1})
        # The tree's levels are kept (proof_cache.py): O(log n) per proof, not a rebuild.  A
        # tree the store vouched for a moment ago proves here, on the event loop; else the
        # store is asked (it blocks) in the thread pool, once for all the GETs of the receipt
        # that arrive meanwhile.
        proof = store.proofs.recent_proof(rid, index)
        if proof is None:
            vouched = await _vouched(store, rid)
            if vouched is None:
                raise ReceiptNotFound(f"no receipt {rid}", field="receipt_id")
            proof = store.proofs.prove(vouched, index)
        admission.rates.observe(PROOFS, 1, time.perf_counter() - t0, marginal=False)
        return proof.to_json()
    finally:
        ticket.release()


#: (event loop, receipt id) -> the store question in flight for it (:func:`_vouched`).
_vouching: dict[tuple[int, str], asyncio.Future[tuple[proof_cache.Receipt, ProofTree] | None]] = {}


async def _vouched(store: ReceiptStore, rid: str) -> tuple[proof_cache.Receipt, ProofTree] | None:
    """Receipt ``rid`` and its tree where the store has it (:meth:`ProofCache.vouch`, in the
    thread pool), else None: GETs of one receipt that arrive together wait for one question
    (and one tree, kept or not) instead of asking 40."""
    key = (id(asyncio.get_running_loop()), rid)  # a future belongs to its loop (tests run several)
    pending = _vouching.get(key)
    if pending is None:
        pending = asyncio.ensure_future(run_in_threadpool(store.proofs.vouch, rid, exists=lambda: store.exists(rid),
                                                          load=lambda: store.get(rid)))
        _vouching[key] = pending
        pending.add_done_callback(lambda _: _vouching.pop(key, None))
    return await asyncio.shield(pending)
