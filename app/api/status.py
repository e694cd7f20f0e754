"""The body of GET /v1/status, also pushed by the /v1/ws/stats feed (one builder, two routes)."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from app import __version__
from app.api.metrics import HTTP_ERRORS
from app.engine.receipts.store import ReceiptStore
from app.engine.runtime import Runtime
from app.engine.verify.status import engine_status


def status_body(runtime: Runtime) -> dict[str, Any]:
    """Host (class and probe), transport pick, UMA pool use, backends and self-test per
    scheme, counters and throughput per scheme (and request latency: ``stats.latency``), limits,
    WebSocket and NIC ingest counters, admission control (items and bytes in flight, refusals),
    HTTP error answers of this process by route and code (``http_errors``), the receipt store
    with its address and the detail of a fault (``store``, :func:`store_status`),
    of ``runtime``.  ``pick`` and ``pool`` are null for a runtime built without a pool."""
    settings = runtime.settings
    hs = runtime.host_status()
    pick = hs["pick"]
    ingest = runtime.ingest  # None in a runtime that has not started
    return {
        "instance": settings.instance,
        "version": __version__,
        "host": {"system": platform.system(), "machine": platform.machine(), "cpus": os.cpu_count(),
                 "python": sys.version.split()[0],
                 "class": pick["host_class"] if pick else None, "label": pick["host_label"] if pick else None,
                 "probe": hs["probe"]},
        "pick": pick,
        "pool": hs["pool"],
        "limits": {"max_items": settings.max_items, "max_body_bytes": settings.max_body_bytes,
                   "max_message_bytes": settings.max_message_bytes,
                   "zap_max_frame_bytes": settings.zap_max_frame_bytes, "zap_max_items": settings.zap_max_items,
                   "ws_max_in_flight": settings.ws_max_in_flight},
        "engine": engine_status(runtime.engine),
        "stats": runtime.stats.snapshot(),
        "websocket": runtime.ws.snapshot(),
        "ingest": ingest.status() if ingest is not None else {"enabled": False, "transports": {}},
        "admission": runtime.admission.snapshot(),
        "store": store_status(runtime.store),
        "http_errors": http_errors(),
    }


def store_status(store: ReceiptStore | None) -> dict[str, Any] | None:
    """The receipt store for admins: ``kind``, ``url`` (password removed) and its health with the
    database's own words (``detail``), which the open ``/readyz`` leaves out; None when receipts are off."""
    if store is None:
        return None
    return {"kind": store.kind, "url": store.url, **store.health.snapshot(detail=True)}


def http_errors() -> list[dict[str, Any]]:
    """The error answers (status >= 400) this process has sent since it started, as
    ``[{"route", "code", "count"}]``, most first: the in-process values of the
    ``zapverify_http_errors_total`` counter (app/api/metrics.py), one worker's with several."""
    out = [{"route": s.labels["route"], "code": s.labels["code"], "count": int(s.value)}
           for metric in HTTP_ERRORS.collect() for s in metric.samples if s.name.endswith("_total") and s.value]
    return sorted(out, key=lambda e: (-e["count"], e["code"], e["route"]))
