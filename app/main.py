"""create_app(): the web wiring of one server process (its :class:`app.engine.runtime.Runtime`):
middleware, error handlers and routers."""

from __future__ import annotations

import logging
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

from app import __version__, build, logs
from app.api import access_log, metrics, security, workers, ws_limits
from app.api.admission import AdmissionControl
from app.api.routes import bls_aggregate, dashboard, info, ops, receipts, stats, verify, ws, zap
from app.api.routes import metrics as metrics_routes
from app.api.schemas import loc_to_field, validation_message
from app.api.service import error_response, is_zap, json_error_response, zap_error_of
from app.api.slowbody import BodyDeadline
from app.config import Settings, get_settings
from app.core.errors import FrameTooLarge, LimitExceeded, ZapVerifyError
from app.engine.runtime import Runtime

log = logging.getLogger("zapverify")


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


ROUTERS = (verify, bls_aggregate, zap, ws, receipts, ops, info, metrics_routes, stats, dashboard)


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    """The ASGI app: web wiring around one process's :class:`Runtime` (the only thing on
    ``app.state``; routes reach its parts through :mod:`app.api.deps`).  ``runtime`` may be
    given (tests; bound to ``settings`` if it has none); else one is built from ``settings``,
    its engine when the app starts.  The app's life span is the runtime's
    (:meth:`Runtime.running`): it closes it when it ends.

    The engine's self-test runs in a background thread, so /healthz answers at once and
    /readyz turns 200 when the self-test has passed; with ``settings.listen_when_ready`` the
    start-up waits for it instead, so the server accepts no connection before it is ready
    (and exits with :class:`app.core.errors.NotReady` if the self-test fails).
    """
    if runtime is None:
        runtime = Runtime(settings=settings or get_settings())
    elif not runtime.bound:
        runtime.bind(settings or get_settings())
    rt, settings = runtime, runtime.settings
    logs.configure(settings.log_format, settings.log_level)  # a no-op under `zapverify serve`, which did it
    # No key in uvicorn's request lines (``?access_token=``) or handshake headers (app/api/access_log.py).
    access_log.install()
    keys = security.load_keys(settings)
    security.warn_if_open(settings, keys)
    # One token bucket per key, shared by HTTP, WebSocket messages and ingest frames.
    buckets = (security.TokenBuckets(settings.rate_limit_per_second, settings.rate_limit_burst)
               if keys and settings.rate_limit_per_second > 0 else None)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async with rt.running(keys=keys, rate=buckets.take if buckets is not None else None,
                              exchange=workers.exchange_dir(metrics.multiprocess_dir()), observer=metrics.LISTENER,
                              background=[lambda: metrics.refresh_forever(rt, rt.admission, ws=rt.ws)]):
            log.info("zapverify %s (commit %s) instance %s: dashboard at http://%s:%d/", __version__,
                     build.commit()[:12], settings.instance, settings.host, settings.port)
            # The lifespan state reaches the connection protocols too: the WebSocket one charges
            # a message's bytes to admission as they arrive (app/api/ws_limits.py).
            yield {ws_limits.ADMISSION_STATE: rt.admission}

    # FastAPIOffline serves /docs and /redoc from packaged assets: no CDN, works air-gapped.
    app = FastAPIOffline(title="zapverify", version=__version__, lifespan=lifespan,
                         description="Batch signature verification: Ed25519, secp256k1 and P-256 ECDSA, BIP-340, "
                                     "BLS12-381, ML-DSA, SLH-DSA.")
    app.state.runtime = rt
    install_error_handlers(app)
    app.add_middleware(BodyDeadline, timeout=settings.body_read_timeout_seconds,
                       min_rate=settings.body_min_bytes_per_second)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, zap_limit=settings.zap_max_frame_bytes)
    app.add_middleware(AdmissionControl, admission=rt.admission)  # after the key check, before the body
    security.install_openapi(app, keys_on=bool(keys))  # securitySchemes, 401/403/429 per scoped route
    app.add_middleware(security.AccessControl, keys=security.KeyRing(keys) if keys else None, buckets=buckets,
                       allowed_origins=settings.allowed_origins)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.trusted_hosts)
    app.add_middleware(metrics.HttpMetrics)  # counts the 413s of BodyLimit too
    app.add_middleware(logs.RequestId)  # every line logged for a request carries its id
    # Outermost: the refusals of every middleware above (401, 413, 503, 400) say who answered too.
    app.add_middleware(InstanceHeader, instance=settings.instance)
    for module in ROUTERS:
        app.include_router(module.router)
    return app


def install_error_handlers(app: FastAPI) -> None:
    """One error shape for every answer: :class:`ZapVerifyError`, Starlette's HTTP errors
    (404, 405, FastAPI's 400 for unreadable JSON) and request validation."""

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
