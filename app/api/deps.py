"""Shared request dependencies: the runtime (engine, stats, pool, store) and the settings live on
``app.state`` (:mod:`app.engine.runtime`)."""

from __future__ import annotations

from fastapi import Request

from app.api.schemas import ITEM_LIMIT
from app.config import Settings
from app.core.errors import BadContentType
from app.engine.receipts.store import ReceiptStore
from app.engine.runtime import Runtime
from app.engine.verify.engine import Engine
from app.wire.zap import Limits


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def get_engine(request: Request) -> Engine:
    return get_runtime(request).engine


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_store(request: Request) -> ReceiptStore | None:
    """The receipt store, or ``None`` when receipts are off."""
    return get_runtime(request).store


async def item_limit(request: Request) -> None:
    """Set :data:`app.api.schemas.ITEM_LIMIT` for this request (``async``: a contextvar set in
    a thread would not reach the body's validation), so an oversized item list is refused
    before its items are validated."""
    ITEM_LIMIT.set(get_settings(request).max_items)


def zap_limits(settings: Settings) -> Limits:
    """The ZAP decoder's bounds from the settings."""
    return Limits(max_frame_bytes=settings.zap_max_frame_bytes, max_items=settings.zap_max_items,
                  max_message_bytes=settings.max_message_bytes)


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower case, parameters dropped."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def require_json(request: Request) -> None:
    """Refuse a body that is not declared JSON (``application/json`` or ``*/*+json``) with
    415 ``BAD_CONTENT_TYPE`` naming ``content-type``, as the ZAP route does for its type,
    instead of a validation error about the body's shape."""
    kind = media_type(request.headers.get("content-type"))
    if kind != "application/json" and not (kind.startswith("application/") and kind.endswith("+json")):
        raise BadContentType("Content-Type must be application/json", field="content-type")
