"""The server's log: one format for every logger (ours and uvicorn's), text or JSON, and a
request id on every record logged while a request is served (docs/operations.md, "Logs").

- :func:`log_config` is the :func:`logging.config.dictConfig` dictionary ``zapverify serve``
  gives uvicorn (``log_config=``), so uvicorn's own lines and ours share one handler and one
  format from the first line on; :func:`configure` applies it where nothing configured
  logging yet (the app built outside ``zapverify serve``).
- ``json`` (``ZAPVERIFY_LOG_FORMAT=json``): one object per line with ``time`` (ISO 8601,
  UTC, milliseconds), ``level``, ``logger``, ``message`` and ``request_id``; uvicorn's access
  lines add ``client``, ``method``, ``path``, ``route`` (the route template, e.g.
  ``/v1/receipts/{batch_id}``), ``status`` and ``duration_ms`` (from the request's arrival to
  the start of its response).  Formatting is python-json-logger's.
- :class:`RequestId` (ASGI middleware) takes the client's ``X-Request-ID`` when it is 1–128
  characters of ``[A-Za-z0-9._:@/+=-]`` and makes a new one (32 hex digits) otherwise; it is
  echoed in the response's ``X-Request-ID``, held in a context variable while the request is
  served (worker threads started with ``run_in_threadpool`` inherit it), and recorded on the
  request's receipts (app/engine/pipeline.py).

API keys never reach a line: the handler also carries :class:`app.api.access_log.RedactKeys`.
"""

from __future__ import annotations

import logging
import logging.config
import re
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pythonjsonlogger.json import JsonFormatter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.context import REQUEST_ID

__all__ = ["HEADER", "RequestId", "configure", "log_config"]

#: The request header a client names its request with, and the response header it is echoed in.
HEADER = "X-Request-ID"
_VALID_ID = re.compile(r"[A-Za-z0-9._:@/+=\-]{1,128}")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass
class _Served:
    """What an access line needs of the request being served (its id is :data:`REQUEST_ID`)."""

    scope: Scope
    started: float = field(default_factory=time.perf_counter)


_SERVED: ContextVar[_Served | None] = ContextVar("zapverify_request", default=None)


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's ``X-Request-ID`` if it is a valid one (module doc), else a new one."""
    for name, value in headers:
        if name.lower() == b"x-request-id":
            text = value.decode("latin-1").strip()
            if _VALID_ID.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


class RequestId:
    """ASGI middleware: a request id per HTTP request and WebSocket (module doc)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        request_id = request_id_of(scope.get("headers") or [])
        token, id_token = _SERVED.set(_Served(scope)), REQUEST_ID.set(request_id)

        async def echoed(msg: Message) -> None:
            if msg["type"] in ("http.response.start", "websocket.accept"):
                headers = list(msg.get("headers") or [])
                headers.append((HEADER.lower().encode(), request_id.encode()))
                msg = {**msg, "headers": headers}
            await send(msg)

        try:
            await self.app(scope, receive, echoed)
        finally:
            _SERVED.reset(token)
            REQUEST_ID.reset(id_token)


class RequestContext(logging.Filter):
    """Adds ``request_id`` to every record, and to uvicorn's access lines the fields of the
    request (``client``, ``method``, ``path``, ``route``, ``status``, ``duration_ms``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        served = _SERVED.get()
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        # uvicorn's colored copy of its message: the JSON line needs one message, not two.
        record.__dict__.pop("color_message", None)
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            client, method, path, _version, status = args
            record.client, record.method, record.path, record.status = client, method, path, status
            if served is not None:
                route = (served.scope or {}).get("route")
                record.route = getattr(route, "path", None)
                record.duration_ms = round((time.perf_counter() - served.started) * 1000, 3)
        return True


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, then ``request_id=…`` when the record has one."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", None)
        return f"{line} request_id={rid}" if rid else line


class JsonLineFormatter(JsonFormatter):
    """One JSON object per record (module doc): python-json-logger with our field names."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s %(message)s",
                         rename_fields={"levelname": "level", "name": "logger"}, json_ensure_ascii=False)

    def add_fields(self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_record, record, message_dict)
        # First in the object, as a reader scans it; UTC whatever the host's zone.
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        log_record["time"] = stamp.replace("+00:00", "Z")
        log_record.setdefault("request_id", None)


def log_config(fmt: Literal["text", "json"] = "text", level: str = "info") -> dict[str, Any]:
    """The dictConfig for ``fmt`` at ``level``: one stderr handler with the request context
    and key redaction, used by the root logger and uvicorn's (which do not propagate)."""
    lvl = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": RequestContext}, "redact": {"()": "app.api.access_log.RedactKeys"}},
        "formatters": {"text": {"()": TextFormatter}, "json": {"()": JsonLineFormatter}},
        "handlers": {"default": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                                 "formatter": fmt, "filters": ["redact", "context"]}},
        "root": {"level": lvl, "handlers": ["default"]},
        "loggers": {name: {"level": lvl, "handlers": ["default"], "propagate": False}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }


def configure(fmt: Literal["text", "json"] = "text", level: str = "info") -> bool:
    """Apply :func:`log_config` unless logging is configured already (a handler on the root
    logger: ``zapverify serve`` gave uvicorn the same config, or a test or an embedding
    program set its own); returns whether it did."""
    if logging.getLogger().handlers:
        return False
    logging.config.dictConfig(log_config(fmt, level))
    return True
