"""Operations: /healthz, /readyz, /v1/schemes, /v1/status, and re-enabling a degraded backend
(POST /v1/admin/backends/{backend}/schemes/{scheme}/enable)."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from app import __version__
from app.api.deps import EngineDep, RuntimeDep, StoreDep
from app.api.schemas import ErrorResponse
from app.api.status import status_body
from app.core.errors import ZapVerifyError
from app.core.schemes import SCHEMES

log = logging.getLogger("zapverify.admin")

router = APIRouter(tags=["ops"])


class SelfTestRefused(ZapVerifyError):
    """A degraded backend was asked to be re-enabled for a scheme and failed its known-answer
    self-test again: it stays degraded."""

    code = "SELFTEST_FAILED"
    status = 409


class EnabledOut(BaseModel):
    backend: str
    scheme: str
    enabled: bool = Field(description="always true: a refusal is a 409")
    was_degraded: str | None = Field(description="the reason it had been degraded for; null if it was not")


@router.get("/healthz",
                  responses={200: {"content": {"application/json": {"example": {"status": "ok"}}}}})
async def healthz() -> dict:
    """Liveness: 200 whenever the process serves requests."""
    return {"status": "ok"}


@router.get("/readyz", responses={
    200: {"content": {"application/json": {"example": {"ready": True, "failed": [], "degraded": {},
                                                       "store": {"up": True, "reason": None, "message": None,
                                                                 "for_seconds": 12.5}}}}},
    503: {"content": {"application/json": {"example": {"ready": False, "failed": [], "degraded": {}, "store": {
        "up": False, "reason": "unreachable", "for_seconds": 3.1,
        "message": "the receipt store's database cannot be reached"}}}}}})
async def readyz(engine: EngineDep, store: StoreDep) -> JSONResponse:
    """Readiness: 200 only once the engine is up, the known-answer check passed for every
    scheme, and the receipt store (when receipts are on) can be written.

    ``degraded`` lists schemes whose accelerated backend failed its check (or a batch) and
    which the CPU serves instead, with the reason per backend (a reason starting ``shadow:`` is
    a shadow check that contradicted the backend at run time); they do not make it 503.

    ``store`` (null when receipts are off): ``up``, ``reason`` (``disk_full``,
    ``unreachable``, ``read_only``, ``io_error``, ``write_failed``; null while up), ``message``
    (what is wrong in words; never the store's address or the driver's text, which this open
    endpoint would show anyone: those are in the log and in ``store.detail`` of the
    admin-scoped ``/v1/status``) and ``for_seconds`` in that state.  The store is probed at
    most once a second (``SELECT 1`` while up, a real write after a failed one), so a stopped
    database shows here within
    about 3 s even without traffic, and recovery without a restart."""
    failed = [s for s, r in engine.routes.items() if not r.selftest.get("cpu")]
    store_state = None
    if store is not None:
        await run_in_threadpool(store.health.check)  # rate-limited; bounded by the probe's timeout
        store_state = store.health.snapshot()
    ready = engine.ready and (store_state is None or store_state["up"])
    body = {"ready": ready, "failed": failed, "degraded": engine.degraded(), "store": store_state}
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/v1/schemes", responses={200: {"content": {"application/json": {"example": {"schemes": [
        {"id": "p256", "code": 4, "family": "p256", "public_key_bytes": [33, 65], "signature_bytes": 64,
         "context": False, "standard": "FIPS 186-5 §6.4.2 (OpenSSL rules)", "options": ["prehashed", "low_s"],
         "signature_formats": ["raw", "der"]}]}}}}})
async def list_schemes() -> dict:
    """Every scheme with its wire code, key and signature sizes, the standard it implements,
    the batch options it takes (``prehashed``, ``allow_high_s``, ``low_s``: a request's flag
    applies to the items of the schemes listed here) and the signature formats a JSON request
    may send it (``raw`` first)."""
    return {"schemes": [
        {"id": s.id, "code": s.code, "family": s.family, "public_key_bytes": list(s.pk_lens),
         "signature_bytes": s.sig_len, "context": s.has_context, "standard": s.standard,
         "options": list(s.options), "signature_formats": list(s.signature_formats)}
        for s in SCHEMES.values()]}


@router.get("/v1/status", responses={200: {"content": {"application/json": {"example": {
        "instance": "host-1234", "version": __version__, "ready": True}}}}})
async def status(runtime: RuntimeDep) -> dict:
    """Host (class and probe), transport pick, UMA pool use, backends and self-test per scheme,
    counters and throughput per scheme, limits, NIC ingest.  ``pick`` and ``pool`` are null for
    a runtime built without a pool.

    ``ingest``: ``bind``, ``ring`` (capacity, depth, high water, frames), ``coalesce`` and per
    transport (``tcp``, ``udp``, ``quic``): ``port`` (null when off), frames and bytes
    received, frames verified, frames ``dropped`` by reason, ``ring_depth`` and
    ``ring_high_water``, replies sent; for QUIC the certificate's SHA-256 fingerprint."""
    return status_body(runtime)


@router.post("/v1/admin/backends/{backend}/schemes/{scheme}/enable", response_model=EnabledOut,
             summary="Re-enable a degraded accelerated backend for one scheme", responses={
                 404: {"model": ErrorResponse, "description": "NOT_FOUND: no such accelerated backend here "
                                                              "(field backend), or scheme it serves (field scheme)"},
                 409: {"model": ErrorResponse, "description": "SELFTEST_FAILED: the backend failed the scheme's "
                                                              "known-answer self-test again and stays degraded"}})
async def enable_backend(backend: Annotated[str, Path(description="an accelerated backend: kernel-host, cuda")],
                         scheme: Annotated[str, Path(description="a scheme id, as in /v1/schemes")],
                         engine: EngineDep) -> dict:
    """Route ``scheme`` to ``backend`` again after it was degraded at run time (a shadow
    mismatch, a failed batch) or at start: the scheme's known-answer self-test is run on the
    backend first, and the backend is re-enabled only if it passes (409 otherwise).  Logged;
    needs the ``admin`` scope."""
    ok, why = await run_in_threadpool(engine.enable, backend, scheme)
    if not ok:
        raise SelfTestRefused(f"{backend} failed the {scheme} known-answer self-test and stays degraded: {why}",
                              field="backend")
    log.warning("operator re-enabled %s for %s over the admin API", backend, scheme)
    return {"backend": backend, "scheme": scheme, "enabled": True, "was_degraded": why or None}


# HEAD for probes and load balancers: the GET handler, the body dropped by the server; kept
# out of the schema so each path keeps one documented operation.
router.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False)
