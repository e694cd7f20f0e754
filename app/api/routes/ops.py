"""Operations: /healthz, /readyz, /v1/schemes, /v1/status."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from app import __version__
from app.api.deps import get_engine
from app.api.status import status_body
from app.core.schemes import SCHEMES
from app.engine.verify.engine import Engine

router = APIRouter(tags=["ops"])


@router.get("/healthz",
                  responses={200: {"content": {"application/json": {"example": {"status": "ok"}}}}})
async def healthz() -> dict:
    """Liveness: 200 whenever the process serves requests."""
    return {"status": "ok"}


@router.get("/readyz", responses={
    200: {"content": {"application/json": {"example": {"ready": True}}}},
    503: {"content": {"application/json": {"example": {"ready": False, "failed": ["ed25519"]}}}}})
async def readyz(engine: Engine = Depends(get_engine)) -> JSONResponse:
    """Readiness: 200 only once the engine is up and the known-answer check passed for every scheme.

    ``degraded`` lists schemes whose accelerated backend failed its check (or a batch) and
    which the CPU serves instead, with the reason per backend; they do not make it 503."""
    failed = [s for s, r in engine.routes.items() if not r.selftest.get("cpu")]
    body = {"ready": engine.ready, "failed": failed, "degraded": engine.degraded()}
    return JSONResponse(body, status_code=200 if engine.ready else 503)


@router.get("/v1/schemes", responses={200: {"content": {"application/json": {"example": {"schemes": [
        {"id": "ed25519", "code": 1, "family": "ed25519", "public_key_bytes": [32], "signature_bytes": 64,
         "context": False, "standard": "RFC 8032 §5.1.7 (libsodium rules)"}]}}}}})
async def list_schemes() -> dict:
    """Every scheme with its wire code, key and signature sizes and the standard it implements."""
    return {"schemes": [
        {"id": s.id, "code": s.code, "family": s.family, "public_key_bytes": list(s.pk_lens),
         "signature_bytes": s.sig_len, "context": s.has_context, "standard": s.standard}
        for s in SCHEMES.values()]}


@router.get("/v1/status", responses={200: {"content": {"application/json": {"example": {
        "instance": "host-1234", "version": __version__, "ready": True}}}}})
async def status(request: Request) -> dict:
    """Host (class and probe), transport pick, UMA pool use, backends and self-test per scheme,
    counters and throughput per scheme, limits, NIC ingest.  ``pick`` and ``pool`` are null for
    a runtime built without a pool.

    ``ingest``: ``bind``, ``ring`` (capacity, depth, high water, frames), ``coalesce`` and per
    transport (``tcp``, ``udp``, ``quic``): ``port`` (null when off), frames and bytes
    received, frames verified, frames ``dropped`` by reason, ``ring_depth`` and
    ``ring_high_water``, replies sent; for QUIC the certificate's SHA-256 fingerprint."""
    return status_body(request.app.state)


# HEAD for probes and load balancers: the GET handler, the body dropped by the server; kept
# out of the schema so each path keeps one documented operation.
router.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False)
