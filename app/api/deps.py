"""What a route needs, as ``Annotated`` dependency aliases: the one way into the process's parts.

The process is its :class:`app.engine.runtime.Runtime` (engine, stats, pool, store, admission,
WebSocket counters, ingest, worker exchange) and its settings; ``app/main.py`` puts the runtime
on ``app.state`` and nothing else, and only this module reads it there.  A route declares
``engine: EngineDep`` (or ``RuntimeDep``, ``SettingsDep``, ...) rather than reaching for
``request.app.state``.  Every alias works for HTTP and WebSocket routes alike
(:class:`HTTPConnection`).

Every dependency here is ``async def``: none does I/O, and FastAPI runs a plain ``def``
dependency in its thread pool, a hop per dependency per request (on a proof GET, four hops
were most of the server's ~1 ms).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from app.api.schemas import ITEM_LIMIT
from app.config import Settings
from app.core.errors import BadContentType
from app.engine.admission import Admission
from app.engine.configs import zap_limits
from app.engine.receipts.store import ReceiptStore
from app.engine.runtime import Runtime
from app.engine.stats import Stats, WsStats
from app.engine.verify.engine import Engine
from app.wire.zap import Limits


async def get_runtime(conn: HTTPConnection) -> Runtime:
    return conn.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_engine(runtime: RuntimeDep) -> Engine:
    return runtime.engine


async def get_settings(runtime: RuntimeDep) -> Settings:
    return runtime.settings


async def get_store(runtime: RuntimeDep) -> ReceiptStore | None:
    """The receipt store, or ``None`` when receipts are off."""
    return runtime.store


async def get_stats(runtime: RuntimeDep) -> Stats:
    return runtime.stats


async def get_admission(runtime: RuntimeDep) -> Admission:
    return runtime.admission


async def get_ws_stats(runtime: RuntimeDep) -> WsStats:
    return runtime.ws


async def item_limit(settings: Annotated[Settings, Depends(get_settings)]) -> None:
    """Set :data:`app.api.schemas.ITEM_LIMIT` for this request (``async`` matters here too: a
    contextvar set in a thread would not reach the body's validation), so an oversized item list is refused
    before its items are validated."""
    ITEM_LIMIT.set(settings.max_items)


async def get_zap_limits(settings: Annotated[Settings, Depends(get_settings)]) -> Limits:
    """The ZAP decoder's bounds from the settings."""
    return zap_limits(settings)


EngineDep = Annotated[Engine, Depends(get_engine)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[ReceiptStore | None, Depends(get_store)]
StatsDep = Annotated[Stats, Depends(get_stats)]
AdmissionDep = Annotated[Admission, Depends(get_admission)]
WsStatsDep = Annotated[WsStats, Depends(get_ws_stats)]
ZapLimitsDep = Annotated[Limits, Depends(get_zap_limits)]


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower case, parameters dropped."""
    return (content_type or "").split(";", 1)[0].strip().lower()


async def require_json(request: Request) -> None:
    """Refuse a body that is not declared JSON (``application/json`` or ``*/*+json``) with
    415 ``BAD_CONTENT_TYPE`` naming ``content-type``, as the ZAP route does for its type,
    instead of a validation error about the body's shape."""
    kind = media_type(request.headers.get("content-type"))
    if kind != "application/json" and not (kind.startswith("application/") and kind.endswith("+json")):
        raise BadContentType("Content-Type must be application/json", field="content-type")


#: ``dependencies=[RequireJson]`` on a route that takes a JSON body.
RequireJson = Depends(require_json)
#: ``dependencies=[ItemLimit]`` on a route whose JSON body holds an item list (:func:`item_limit`).
ItemLimit = Depends(item_limit)
