"""create_app(): settings, the engine's life span, error handlers and routers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__, logs
from app.api import access_log, metrics, security, workers, ws_limits
from app.api.admission import Admission, AdmissionControl
from app.api.deps import zap_limits
from app.api.routes import bls_aggregate, dashboard, ops, receipts, stats, verify, ws, zap
from app.api.routes import metrics as metrics_routes
from app.api.schemas import loc_to_field, validation_message
from app.api.service import error_response, is_zap, json_error_response, zap_error_of
from app.api.slowbody import BodyDeadline
from app.config import Settings, get_settings
from app.core.errors import FrameTooLarge, LimitExceeded, NotReady, StoreUnavailable, ZapVerifyError
from app.engine.backends.factory import accelerated_backends
from app.engine.ingest import Ingest, IngestConfig
from app.engine.receipts.open import open_store
from app.engine.receipts.pruner import Pruner
from app.engine.receipts.store import ReceiptStore
from app.engine.runtime import PoolConfig, Runtime
from app.engine.verify.engine import EngineConfig

log = logging.getLogger("zapverify")


def engine_config(settings: Settings) -> EngineConfig:
    return EngineConfig(backend=settings.backend, cpu_workers=settings.cpu_workers, cpu_chunk=settings.cpu_chunk,
                        bls_batch=settings.bls_batch,
                        crossover=dict(settings.crossover), hybrid=settings.hybrid,
                        hybrid_min=settings.hybrid_min, faults=dict(settings.faults),
                        shadow_rate=settings.shadow_rate, shadow_min_per_batch=settings.shadow_min_per_batch,
                        shadow_warmup_items=settings.shadow_warmup_items, shadow_mode=settings.shadow_mode,
                        shadow_queue_items=settings.shadow_queue_items)


def pool_config(settings: Settings) -> PoolConfig:
    return PoolConfig(size_bytes=settings.uma_pool_bytes, transport=settings.transport, source=settings.pool_source,
                      wait_seconds=settings.pool_wait_seconds, debug=settings.pool_debug)


class InstanceHeader:
    """ASGI middleware: ``X-Zapverify-Instance`` (``settings.instance``) on every HTTP response,
    so a client behind the load balancer can tell which replica answered, refusals included."""

    def __init__(self, app: ASGIApp, instance: str):
        self.app, self.value = app, instance.encode("latin-1", errors="replace")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def stamped(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                msg = {**msg, "headers": [*(msg.get("headers") or []), (b"x-zapverify-instance", self.value)]}
            await send(msg)

        await self.app(scope, receive, stamped)


def ingest_config(settings: Settings, *, reuse_port: bool = False, admission: Admission | None = None,
                  keys: Sequence[security.ApiKey] = (), rate: Callable[[str], float] | None = None) -> IngestConfig:
    """The ingest listeners of ``settings`` (a port of 0 leaves its transport off).

    ``reuse_port``: several worker processes bind the same ports (``SO_REUSEPORT``).  ``keys``:
    the API keys (any: TCP and QUIC require the keyed handshake); ``rate``: a key's token
    bucket, shared with the HTTP routes.  A half-received frame has the HTTP body's read
    deadline and minimum rate; the handshake, the request head's deadline."""
    def port(p: int) -> int | None:
        return p or None

    return IngestConfig(host=settings.ingest_host, tcp_port=port(settings.ingest_tcp_port),
                        udp_port=port(settings.ingest_udp_port), quic_port=port(settings.ingest_quic_port),
                        ring_slots=settings.ingest_ring_slots, coalesce_items=settings.ingest_coalesce_items,
                        coalesce_wait_seconds=settings.ingest_coalesce_wait_seconds,
                        max_in_flight=settings.ingest_max_in_flight, workers=settings.ingest_workers,
                        quic_cert=str(settings.ingest_quic_cert) if settings.ingest_quic_cert else None,
                        quic_key=str(settings.ingest_quic_key) if settings.ingest_quic_key else None,
                        shutdown_seconds=settings.ingest_shutdown_seconds,
                        pool_wait_seconds=settings.pool_wait_seconds, limits=zap_limits(settings),
                        reuse_port=reuse_port, admission=admission,
                        reserve_step_bytes=settings.zap_reserve_step_bytes,
                        frame_timeout_seconds=settings.body_read_timeout_seconds,
                        frame_min_bytes_per_second=settings.body_min_bytes_per_second,
                        auth_keys=tuple(keys), handshake_timeout_seconds=settings.header_timeout_seconds,
                        udp_unauthenticated=settings.ingest_udp_unauthenticated, rate=rate)


def build_runtime(settings: Settings) -> Runtime:
    """The runtime of ``settings``: its pool, and an engine with the accelerated backends this
    host has."""
    backends = accelerated_backends(settings.backend, cuda_device=settings.cuda_device,
                                    cuda_transfer=settings.cuda_transfer, kernel_variant=settings.kernel_variant,
                                    chunk_items=settings.cuda_chunk_items,
                                    waves=settings.cuda_waves, streams=settings.cuda_streams)
    return Runtime.open(engine_config(settings), pool_config(settings), backends=backends)


def _error(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    body = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return JSONResponse({"error": body}, status_code=status)


class BodyLimit:
    """Refuses a request body over ``limit`` bytes with 413, before it is buffered whole.

    Checks Content-Length first, then counts the bytes of a chunked body as they arrive.
    A ZAP body (``application/x-zap``) has its own limit, ``zap_limit``, and is refused with
    a ZAP error frame rather than JSON.
    """

    def __init__(self, app: ASGIApp, limit: int, zap_limit: int | None = None):
        self.app, self.limit, self.zap_limit = app, limit, zap_limit or limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        zap_body = is_zap(headers.get(b"content-type", b"").decode("latin-1"))
        limit = self.zap_limit if zap_body else self.limit
        too_big = (FrameTooLarge if zap_body else LimitExceeded)(f"request body over {limit} bytes", field="body")
        if length is not None and length.isdigit() and int(length) > limit:
            return await self._refuse(too_big, zap_body)(scope, receive, send)
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    raise too_big
            return msg

        async def tracked_send(msg: Message) -> None:
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, counted, tracked_send)
        except* LimitExceeded:  # bare, or grouped by a middleware that was reading the body too
            if not started:
                await self._refuse(too_big, zap_body)(scope, receive, send)

    @staticmethod
    def _refuse(exc: LimitExceeded, zap_body: bool):
        return error_response(exc, zap_body=zap_body)


async def open_store_waiting(settings: Settings) -> ReceiptStore:
    """Open the receipt store, retrying for up to ``settings.database_wait_seconds`` while the
    database cannot be reached (raises the last :class:`StoreUnavailable` after that)."""
    deadline = time.monotonic() + settings.database_wait_seconds
    while True:
        try:
            return await asyncio.to_thread(open_store, settings.receipts_database_url,
                                           pool_size=settings.database_pool_size)
        except StoreUnavailable as exc:
            if time.monotonic() >= deadline:
                raise
            log.warning("receipt store not reachable yet, retrying: %s", exc.message)
            await asyncio.sleep(1.0)


async def _cancelled(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    """The ASGI app.  ``runtime`` may be given (tests); else one is built from ``settings``
    (:func:`build_runtime`).  The app closes it when its life span ends.

    The engine's self-test runs in a background thread, so /healthz answers at once and
    /readyz turns 200 when the self-test has passed; with ``settings.listen_when_ready`` the
    start-up waits for it instead, so the server accepts no connection before it is ready
    (and exits with :class:`NotReady` if the self-test fails).
    """
    settings = settings or get_settings()
    logs.configure(settings.log_format, settings.log_level)  # a no-op under `zapverify serve`, which did it
    # No key in uvicorn's request lines (``?access_token=``) or handshake headers (app/api/access_log.py).
    access_log.install()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        rt = runtime or build_runtime(settings)
        eng = rt.engine
        app.state.runtime = rt
        rt.stats.add_listener(metrics.LISTENER)
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(rt.close)
            # Receipts (docs/architecture.md, "Merkle leaf and receipts"): opened, and migrated, before
            # the first request; a store that cannot be opened stops the start rather than serving
            # unrecorded verdicts.
            store = await open_store_waiting(settings) if settings.receipts else None
            if store is not None:
                store.proofs.max_bytes = settings.receipt_proof_cache_bytes
            rt.store = store
            if store:
                stack.callback(store.close)
                store.add_listener(metrics.LISTENER)  # write latency (app/api/metrics.py)
            pruner = Pruner(store, max_age_seconds=settings.retention_max_age_seconds,
                            max_rows=settings.retention_max_rows,
                            interval_seconds=settings.prune_interval_seconds) if store else None
            app.state.pruner = pruner
            if pruner:
                pruner.start()
                stack.callback(pruner.stop)
            if not eng.ready and settings.listen_when_ready:
                await asyncio.to_thread(eng.start)
                if not eng.ready:
                    raise NotReady("the engine's self-test failed; not accepting connections (see the log)")
            elif not eng.ready:
                threading.Thread(target=eng.start, name="zv-engine-start", daemon=True).start()
            # Admission's time bound learns each scheme's cost from the batches verified here.
            rt.stats.add_listener(app.state.admission.rates)
            stack.callback(rt.stats.remove_listener, app.state.admission.rates)
            gauges = asyncio.create_task(metrics.refresh_forever(rt, app.state.admission, ws=app.state.ws_stats))
            stack.push_async_callback(_cancelled, gauges)
            # Several workers: each shows the whole server (app/api/workers.py).
            path = workers.exchange_dir(metrics.multiprocess_dir())
            app.state.workers = workers.WorkerExchange(path, rt) if path else None
            if app.state.workers:
                exchange = app.state.workers
                rt.stats.set_peers(exchange.peer_stats)
                stack.callback(rt.stats.set_peers, None)
                stack.callback(exchange.withdraw)
                stack.push_async_callback(_cancelled, asyncio.create_task(exchange.publish_forever()))
            # NIC ingest (app/engine/ingest): frames that arrive before the self-test passed are
            # answered NOT_READY.  Its frame outcomes feed the dashboard and /metrics through the
            # engine's stats.  Stopped first on the way out (the stack unwinds last in, first out),
            # so every frame taken in is answered, with its receipt, before the store closes.
            ingest = Ingest(rt, ingest_config(settings, reuse_port=app.state.workers is not None,
                                              admission=app.state.admission, keys=keys,
                                              rate=buckets.take if buckets is not None else None),
                            observer=rt.stats.record_frame)
            app.state.ingest = ingest
            ingest.start()
            stack.push_async_callback(asyncio.to_thread, ingest.stop)
            log.info("zapverify %s instance %s: dashboard at http://%s:%d/", __version__, settings.instance,
                     settings.host, settings.port)
            # The lifespan state reaches the connection protocols too: the WebSocket one charges
            # a message's bytes to admission as they arrive (app/api/ws_limits.py).
            yield {ws_limits.ADMISSION_STATE: app.state.admission}

    # FastAPIOffline serves /docs and /redoc from packaged assets: no CDN, works air-gapped.
    app = FastAPIOffline(title="zapverify", version=__version__, lifespan=lifespan,
                  description="Batch signature verification: Ed25519, secp256k1 and P-256 ECDSA, BIP-340, "
                              "BLS12-381, ML-DSA, SLH-DSA.")
    app.state.settings = settings
    app.state.ws_stats = ws.WsStats()

    @app.exception_handler(ZapVerifyError)
    async def _zap_error(request: Request, exc: ZapVerifyError) -> JSONResponse:
        return json_error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        # FastAPI turns an error raised while it reads the body (BodyLimit's LimitExceeded on
        # a chunked body) into a plain 400; answer the error that was really raised.
        cause = exc.__cause__
        if isinstance(cause, BaseExceptionGroup):  # the http middleware's task group wraps it
            cause = zap_error_of(cause) or cause
        if isinstance(cause, ZapVerifyError):
            return await _zap_error(request, cause)
        if exc.status_code < 400:
            return await http_exception_handler(request, exc)
        if exc.status_code == 400 and isinstance(cause, (UnicodeDecodeError, RecursionError, ValueError)):
            # FastAPI's own 400 for a body its JSON parser could not read (not UTF-8, nested
            # past the parser's depth): the same answer as any other unreadable JSON.
            why = ("nested too deeply for the parser" if isinstance(cause, RecursionError)
                   else "not UTF-8 text" if isinstance(cause, UnicodeDecodeError) else "not JSON")
            return _error(422, "BAD_JSON", f"the body is not readable JSON: {why}", "body")
        # 404, 405, ...: the same error shape as everything else, code from the status phrase.
        code = HTTPStatus(exc.status_code).phrase.upper().replace(" ", "_").replace("-", "_")
        return JSONResponse({"error": {"code": code, "message": str(exc.detail)}}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": ("body",), "msg": "invalid request"}
        if first.get("type") == "json_invalid":  # its loc is a character position, not a field
            return _error(422, "BAD_JSON", f"{first.get('msg')} at character {first['loc'][-1]}", "body")
        field = loc_to_field(tuple(first.get("loc", ())))
        return _error(422, "BAD_REQUEST", validation_message(first, field), field)

    app.add_middleware(BodyDeadline, timeout=settings.body_read_timeout_seconds,
                       min_rate=settings.body_min_bytes_per_second)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, zap_limit=settings.zap_max_frame_bytes)
    app.state.admission = Admission(settings.admission_max_items, settings.admission_max_bytes,
                                    settings.admission_retry_after_seconds,
                                    default_deadline=settings.admission_default_deadline_seconds,
                                    max_deadline=settings.admission_max_deadline_seconds,
                                    pipeline=settings.admission_pipeline_seconds,
                                    max_queued=settings.admission_max_queued,
                                    max_share=settings.admission_max_share)
    app.add_middleware(AdmissionControl, admission=app.state.admission)  # after the key check, before the body
    keys = security.load_keys(settings)
    security.warn_if_open(settings, keys)
    security.install_openapi(app, keys_on=bool(keys))  # securitySchemes, 401/403/429 per scoped route
    # One token bucket per key, shared by HTTP, WebSocket messages and ingest frames (the lifespan's).
    buckets = (security.TokenBuckets(settings.rate_limit_per_second, settings.rate_limit_burst)
               if keys and settings.rate_limit_per_second > 0 else None)
    app.add_middleware(security.AccessControl, keys=security.KeyRing(keys) if keys else None, buckets=buckets,
                       allowed_origins=settings.allowed_origins)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.trusted_hosts)
    app.add_middleware(metrics.HttpMetrics)  # counts the 413s of BodyLimit too
    app.add_middleware(logs.RequestId)  # every line logged for a request carries its id
    # Outermost: the refusals of every middleware above (401, 413, 503, 400) say who answered too.
    app.add_middleware(InstanceHeader, instance=settings.instance)
    for module in (verify, bls_aggregate, zap, ws, receipts, ops, metrics_routes, stats, dashboard):
        app.include_router(module.router)
    return app
