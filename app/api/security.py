"""Access control: API keys with scopes, a token bucket per key, WebSocket origins, security
headers (docs/operations.md, "Access control").

Keys are configured by their SHA-256 digest only (``settings.api_keys`` / ``api_keys_file``,
entries ``<sha256 hex>:<scope>[+<scope>...][:<name>]``), so a leaked configuration does not
leak a key; API keys are long random strings, for which one SHA-256 is a sound digest.  A
presented key is hashed and compared with every configured digest by
:func:`hmac.compare_digest`, all of them each time, so timing tells nothing about which
digest came close.

Scopes: ``verify`` (POST /v1/verify*, WS /v1/ws/verify), ``receipts`` (GET /v1/receipts*),
``admin`` (/metrics, /v1/status, WS /v1/ws/stats, POST /v1/admin/*; an ``admin`` key also
reads receipts, :data:`IMPLIED`, since the dashboard it opens links every batch to its
receipt).  Always open: /healthz, /readyz, the
API docs, /v1/schemes and the dashboard page itself (it holds no data; its script reads
/v1/status and /v1/ws/stats with a key given in the page's ``#key=`` fragment).  A key is
read from ``Authorization: Bearer <key>``, ``X-API-Key: <key>``, then, for browser
WebSockets which cannot set headers, the ``Sec-WebSocket-Protocol`` header: the client
offers the subprotocols ``zapverify.v1`` and ``zapverify.key.<base64url of the key, no
padding>``, and the server accepts ``zapverify.v1`` (never echoing the key-bearing one).
Last, deprecated because a URL is what proxies and servers log, the ``access_token`` query
parameter (redacted from uvicorn's log by app/api/access_log.py).

The rate limit is charged once per request or WebSocket connection here, and once per
WebSocket message by the route (:func:`message_rate`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import Settings
from app.core.errors import Forbidden, RateLimited, Unauthorized, ZapVerifyError

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger("zapverify.security")

SCOPES = frozenset({"verify", "receipts", "admin"})
#: Scopes a scope brings with it: an ``admin`` key opens everything the dashboard shows,
#: the receipts its batch links point at included (docs/operations.md, "Access control").
IMPLIED: dict[str, frozenset[str]] = {"admin": frozenset({"receipts"})}
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}

#: The WebSocket subprotocol the server accepts when a browser passes its key in
#: ``Sec-WebSocket-Protocol``; the key rides in a second offered one, :data:`KEY_SUBPROTOCOL` + key.
SUBPROTOCOL = "zapverify.v1"
KEY_SUBPROTOCOL = "zapverify.key."
#: Where :class:`AccessControl` leaves a WebSocket's per-message rate charge in ``scope["state"]``.
RATE_STATE = "zapverify.rate"
#: Where :class:`AccessControl` leaves the name of the key a request came with (admission's
#: fair queue serves clients by it: app/api/admission.py).
KEY_STATE = "zapverify.key"


def required_scope(path: str) -> str | None:
    """The scope ``path`` needs, or None for an open path."""
    if path.startswith("/v1/verify") or path == "/v1/ws/verify":
        return "verify"
    if path.startswith("/v1/receipts"):
        return "receipts"
    if path in ("/metrics", "/v1/status", "/v1/ws/stats") or path.startswith("/v1/admin/"):
        return "admin"
    return None


@dataclass(frozen=True)
class ApiKey:
    """A configured key: the SHA-256 of its text, the scopes it grants (those configured and
    the ones they imply, :data:`IMPLIED`) and a name for logs and metrics."""

    digest: bytes
    scopes: frozenset[str]
    name: str


def parse_key(entry: str) -> ApiKey:
    """One ``<sha256 hex>:<scope>[+<scope>...][:<name>]`` entry.  Raises ``ValueError`` naming
    what is wrong (the settings then refuse to start)."""
    parts = entry.strip().split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"API key entry {entry[:12]!r}…: expected <sha256 hex>:<scopes>[:<name>]")
    hexdigest, scopes_text = parts[0], parts[1]
    try:
        digest = bytes.fromhex(hexdigest)
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise ValueError(f"API key entry {entry[:12]!r}…: the first part must be 64 hex digits (SHA-256 of the key)")
    scopes = frozenset(scopes_text.split("+"))
    if not scopes or not scopes <= SCOPES:
        raise ValueError(f"API key entry {entry[:12]!r}…: scopes must be among {sorted(SCOPES)}, joined by '+'")
    granted = scopes.union(*(IMPLIED.get(s, frozenset()) for s in scopes))
    return ApiKey(digest, granted, parts[2] if len(parts) == 3 and parts[2] else hexdigest[:8])


def load_keys(settings: Settings) -> list[ApiKey]:
    """Every key of ``settings.api_keys`` and ``settings.api_keys_file`` (blank lines and
    ``#`` comments skipped).  Raises ``ValueError`` or ``OSError`` for a bad entry or file."""
    entries = list(settings.api_keys)
    if settings.api_keys_file is not None:
        for line in Path(settings.api_keys_file).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                entries.append(line)
    return [parse_key(e) for e in entries]


def key_digest(key: str) -> str:
    """The hex digest to configure for the key text ``key`` (``zapverify`` docs show how)."""
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """The configured keys; :meth:`lookup` in constant time over all of them."""

    def __init__(self, keys: list[ApiKey]):
        self.keys = keys

    def lookup(self, presented: str) -> ApiKey | None:
        digest = hashlib.sha256(presented.encode()).digest()
        found = None
        for key in self.keys:  # no early exit: every comparison runs
            if hmac.compare_digest(digest, key.digest):
                found = key
        return found


class TokenBuckets:
    """One token bucket per key name: ``rate`` tokens a second, at most ``burst`` saved."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst = rate, burst
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, name: str, now: float | None = None) -> float:
        """Take a token for ``name``: 0.0 when granted, else the seconds until one is there."""
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, at = self._state.get(name, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._state[name] = (tokens - 1.0, now)
                return 0.0
            self._state[name] = (tokens, now)
            return (1.0 - tokens) / self.rate


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def subprotocol_key(key: str) -> str:
    """The subprotocol that carries ``key``: ``zapverify.key.`` + base64url of its UTF-8, no
    padding (an HTTP token, as ``Sec-WebSocket-Protocol`` requires, whatever the key holds)."""
    return KEY_SUBPROTOCOL + base64.urlsafe_b64encode(key.encode()).rstrip(b"=").decode("ascii")


def _key_of_subprotocols(scope: Scope) -> str | None:
    for proto in scope.get("subprotocols") or ():
        if proto.startswith(KEY_SUBPROTOCOL):
            text = proto[len(KEY_SUBPROTOCOL):]
            try:
                return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            except (binascii.Error, ValueError):
                raise Unauthorized(f"the {KEY_SUBPROTOCOL}… subprotocol is not base64url of a key",
                                   field="sec-websocket-protocol") from None
    return None


def presented_key(scope: Scope) -> str | None:
    """The API key a request carries (see the module doc for where), or None.

    Raises :class:`Unauthorized` for a ``zapverify.key.`` subprotocol that is not base64url."""
    headers = _headers(scope)
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    if "x-api-key" in headers:
        return headers["x-api-key"].strip()
    if scope["type"] == "websocket":
        key = _key_of_subprotocols(scope)
        if key is not None:
            return key
    token = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("access_token")
    return token[0] if token else None


def message_rate(scope: Scope) -> Callable[[], float] | None:
    """For a WebSocket that :class:`AccessControl` let in with a rate-limited key: a call that
    takes one token of that key's bucket per message (0.0 when granted, else the seconds
    until the next token).  None when no rate limit applies."""
    return (scope.get("state") or {}).get(RATE_STATE)


def origin_allowed(scope: Scope, allowed: list[str]) -> bool:
    """Whether a WebSocket's ``Origin`` may connect: absent (not a browser), the page's own
    origin (same scheme-less host as the ``Host`` header), or in ``allowed``."""
    headers = _headers(scope)
    origin = headers.get("origin")
    if origin is None:
        return True
    if origin in allowed:
        return True
    host = headers.get("host", "")
    return origin.split("://", 1)[-1] == host


class AccessControl:
    """ASGI middleware: WebSocket origin check, then API key, scope and rate limit.

    Refusals are the usual error shape (401 with ``WWW-Authenticate: Bearer``, 403, 429 with
    ``Retry-After``); a WebSocket is refused before it is accepted (close code 1008), which
    the client sees as HTTP 403.
    """

    def __init__(self, app: ASGIApp, *, keys: KeyRing | None, buckets: TokenBuckets | None,
                 allowed_origins: list[str]):
        self.app, self.keys, self.buckets, self.allowed_origins = app, keys, buckets, allowed_origins

    def check(self, scope: Scope) -> None:
        """Raise the :class:`ZapVerifyError` that refuses ``scope``, or return.  A WebSocket let
        in with a rate-limited key gets its per-message charge in ``scope["state"]``
        (:func:`message_rate`)."""
        if scope["type"] == "websocket" and not origin_allowed(scope, self.allowed_origins):
            raise Forbidden("this Origin may not open a WebSocket here (settings.allowed_origins)", field="origin")
        need = required_scope(scope["path"])
        if self.keys is None or need is None:
            return
        text = presented_key(scope)
        key = self.keys.lookup(text) if text else None
        if key is None:
            raise Unauthorized("an API key is required: Authorization: Bearer <key>" if text is None
                               else "unknown API key", field="authorization")
        if need not in key.scopes:
            raise Forbidden(f"this key lacks the {need!r} scope", field="authorization")
        scope.setdefault("state", {})[KEY_STATE] = key.name
        if self.buckets is not None:
            wait = self.buckets.take(key.name)
            if wait > 0:
                raise RateLimited(f"rate limit of key {key.name!r}; retry in {wait:.2f} s", retry_after=wait)
            if scope["type"] == "websocket":
                scope.setdefault("state", {})[RATE_STATE] = functools.partial(self.buckets.take, key.name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        try:
            self.check(scope)
        except ZapVerifyError as exc:
            await refuse(scope, receive, send, exc)
            return
        if scope["type"] == "websocket" and SUBPROTOCOL in (scope.get("subprotocols") or ()):
            send = _accepting_subprotocol(send)
        await self.app(scope, receive, send)


def _accepting_subprotocol(send: Send) -> Send:
    """``send`` that accepts :data:`SUBPROTOCOL` when the route accepts with none: a browser
    that offered subprotocols fails a handshake whose answer names none of them."""
    async def accepting(message: Message) -> None:
        if message["type"] == "websocket.accept" and not message.get("subprotocol"):
            message = {**message, "subprotocol": SUBPROTOCOL}
        await send(message)
    return accepting


async def refuse(scope: Scope, receive: Receive, send: Send, exc: ZapVerifyError) -> None:
    """Answer ``exc`` without running the app: the JSON error (HTTP) or a close (WebSocket)."""
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008, "reason": f"{exc.code}: {exc.message}"[:120]})
        return
    from starlette.responses import JSONResponse

    headers = {}
    if isinstance(exc, RateLimited) or getattr(exc, "retry_after", None):
        headers["Retry-After"] = str(max(1, math.ceil(getattr(exc, "retry_after", 1))))
    if type(exc) is Unauthorized:
        headers["WWW-Authenticate"] = 'Bearer realm="zapverify"'
    await JSONResponse({"error": exc.to_dict()}, status_code=exc.status, headers=headers)(scope, receive, send)


#: Headers every HTML page gets: no framing (clickjacking), no MIME sniffing, no referrer
#: leaking batch ids, and a CSP that lets the dashboard's own inline script and style and
#: its same-origin feeds run, nothing else.
HTML_SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
                                "'unsafe-inline'; img-src 'self' data:; connect-src 'self' ws: wss:; "
                                "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


# ------------------------------------------------------------------ the OpenAPI description
#: The security schemes of the OpenAPI schema: the two headers :func:`presented_key` reads
#: for clients that can set headers (the subprotocol and ``?access_token=`` are for browsers
#: and old clients, and are not described).
SECURITY_SCHEMES = {
    "bearerAuth": {"type": "http", "scheme": "bearer",
                   "description": "an API key as `Authorization: Bearer <key>` (docs/operations.md, "
                                  "\"Access control\"); WebSockets take it in the handshake too"},
    "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "X-API-Key",
                     "description": "the same API key as `X-API-Key: <key>`"},
}
_ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}


def _refusals(scope: str) -> dict[str, dict]:
    """The 401, 403 and 429 answers of :class:`AccessControl` to a request for ``scope``."""
    def answer(description: str, code: str, message: str, headers: dict | None = None) -> dict:
        error = {"code": code, "message": message, **({"field": "authorization"} if code != "RATE_LIMITED" else {})}
        out: dict = {"description": description,
                     "content": {"application/json": {"schema": _ERROR_REF, "example": {"error": error}}}}
        if headers:
            out["headers"] = headers
        return out
    return {
        "401": answer("UNAUTHORIZED: no API key, or one the server does not know (keys are on)", "UNAUTHORIZED",
                      "an API key is required: Authorization: Bearer <key>",
                      {"WWW-Authenticate": {"schema": {"type": "string"}, "description": 'Bearer realm="zapverify"'}}),
        "403": answer(f"FORBIDDEN: the key lacks the `{scope}` scope", "FORBIDDEN",
                      f"this key lacks the {scope!r} scope"),
        "429": answer("RATE_LIMITED: past the key's rate limit (ZAPVERIFY_RATE_LIMIT_PER_SECOND); retry after "
                      "Retry-After seconds", "RATE_LIMITED", "rate limit of key 'ops'; retry in 0.40 s",
                      {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds, at least 1"}}),
    }


def document_access(schema: dict, *, keys_on: bool) -> dict:
    """Add access control to an OpenAPI ``schema`` (in place; returned): the security schemes,
    and on each operation whose path needs a scope (:func:`required_scope`) its ``security``
    (required when the server has keys, ``keys_on``, else optional: a key is accepted and not
    needed), the scope in its description, and the 401/403/429 answers with the error schema.
    Open paths are left as they are."""
    schema.setdefault("components", {}).setdefault("securitySchemes", {}).update(SECURITY_SCHEMES)
    if "ErrorResponse" not in schema["components"].setdefault("schemas", {}):
        from app.api.schemas import ErrorResponse

        body = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
        schema["components"]["schemas"].update(body.pop("$defs", {}))
        schema["components"]["schemas"]["ErrorResponse"] = body
    for path, operations in schema.get("paths", {}).items():
        scope = required_scope(path)
        if scope is None:
            continue
        for op in operations.values():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            op["security"] = ([] if keys_on else [{}]) + [{name: []} for name in SECURITY_SCHEMES]
            note = (f"Needs an API key with the `{scope}` scope" + ("." if keys_on else
                    " on a server with keys (this one has none: open).") +
                    " `Authorization: Bearer <key>` or `X-API-Key: <key>`.")
            op["description"] = f"{op['description']}\n\n{note}" if op.get("description") else note
            for status, answer in _refusals(scope).items():
                op["responses"].setdefault(status, answer)
    return schema


def install_openapi(app: FastAPI, *, keys_on: bool) -> None:
    """Make ``app`` (a FastAPI app) serve its schema with :func:`document_access` applied,
    built once like FastAPI's own; ``/docs`` then has an Authorize button."""
    build = app.openapi

    def openapi() -> dict:
        fresh = app.openapi_schema is None
        schema = build()
        return document_access(schema, keys_on=keys_on) if fresh else schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend its schema


def warn_if_open(settings: Settings, keys: list[ApiKey]) -> bool:
    """Log a warning when the server listens beyond loopback with no API keys; True if it did."""
    if keys or settings.host in _LOOPBACK:
        return False
    log.warning("listening on %s with no API keys: anyone who reaches this port may verify, read receipts "
                "and metrics (set ZAPVERIFY_API_KEYS or ZAPVERIFY_API_KEYS_FILE; docs/operations.md)", settings.host)
    return True
