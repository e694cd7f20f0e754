"""create_app(): settings, the engine's life span, error handlers and routers."""

from __future__ import annotations

import logging
import threading
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__
from app.api import routes_dashboard, routes_ops, routes_receipts, routes_verify
from app.config import Settings, get_settings
from app.engine.dispatch import Engine, EngineConfig
from app.engine.store import Pruner, open_store
from app.errors import LimitExceeded, ZapVerifyError

log = logging.getLogger("zapverify")


def engine_config(settings: Settings) -> EngineConfig:
    return EngineConfig(backend=settings.backend, cpu_workers=settings.cpu_workers, cpu_chunk=settings.cpu_chunk,
                        pool_bytes=settings.uma_pool_bytes, transport=settings.transport,
                        pool_source=settings.pool_source, pool_wait_seconds=settings.pool_wait_seconds,
                        pool_debug=settings.pool_debug)


def _error(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    body = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return JSONResponse({"error": body}, status_code=status)


def _loc_to_field(loc: tuple) -> str:
    """("body", "items", 3, "public_key") -> "items[3].public_key"; ("query", "limit") -> "limit"."""
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path", "header", "cookie") else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


class BodyLimit:
    """Refuses a request body over ``limit`` bytes with 413, before it is buffered whole.

    Checks Content-Length first, then counts the bytes of a chunked body as they arrive.
    """

    def __init__(self, app: ASGIApp, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        too_big = LimitExceeded(f"request body over {self.limit} bytes", field="body")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await _error(413, too_big.code, too_big.message, too_big.field)(scope, receive, send)
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise too_big
            return msg

        async def tracked_send(msg: Message) -> None:
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, counted, tracked_send)
        except LimitExceeded:
            if not started:
                await _error(413, too_big.code, too_big.message, too_big.field)(scope, receive, send)


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    """The ASGI app.  ``engine`` may be given (tests); else one is built from ``settings``.

    The engine's self-test runs in a background thread, so /healthz answers at once and
    /readyz turns 200 when the self-test has passed.
    """
    settings = settings or get_settings()
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        eng = engine or Engine(engine_config(settings))
        app.state.engine = eng
        # Receipts (DESIGN.md section 5): opened, and migrated, before the first request;
        # a store that cannot be opened stops the start rather than serving unrecorded verdicts.
        store = open_store(settings.receipts_database_url, pool_size=settings.database_pool_size) \
            if settings.receipts else None
        app.state.store = store
        pruner = Pruner(store, max_age_seconds=settings.retention_max_age_seconds,
                        max_rows=settings.retention_max_rows,
                        interval_seconds=settings.prune_interval_seconds) if store else None
        app.state.pruner = pruner
        if pruner:
            pruner.start()
        if not eng.ready:
            threading.Thread(target=eng.start, name="zv-engine-start", daemon=True).start()
        log.info("zapverify %s instance %s: dashboard at http://%s:%d/", __version__, settings.instance,
                 settings.host, settings.port)
        try:
            yield
        finally:
            if pruner:
                pruner.stop()
            if store:
                store.close()
            eng.close()

    app = FastAPI(title="zapverify", version=__version__, lifespan=lifespan,
                  description="Batch signature verification: Ed25519, secp256k1, BLS12-381, ML-DSA, SLH-DSA.")
    app.state.settings = settings

    @app.exception_handler(ZapVerifyError)
    async def _zap_error(request: Request, exc: ZapVerifyError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message, exc.field)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": ("body",), "msg": "invalid request"}
        return _error(422, "BAD_REQUEST", str(first.get("msg")), _loc_to_field(tuple(first.get("loc", ()))))

    @app.middleware("http")
    async def _instance_header(request: Request, call_next):
        response = await call_next(request)
        response.headers["X-Zapverify-Instance"] = settings.instance
        return response

    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    for module in (routes_verify, routes_receipts, routes_ops, routes_dashboard):
        app.include_router(module.router)
    return app
