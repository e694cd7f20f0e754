"""The body of GET /v1/status, also pushed by the /v1/ws/stats feed (one builder, two routes)."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from starlette.datastructures import State

from app import __version__
from app.config import Settings
from app.engine.runtime import Runtime
from app.engine.verify.status import engine_status


def status_body(state: State) -> dict[str, Any]:
    """Host (class and probe), transport pick, UMA pool use, backends and self-test per
    scheme, counters and throughput per scheme, limits, WebSocket and NIC ingest counters,
    admission control (items and bytes in flight, refusals),
    from an app's ``state`` (its ``runtime``, ``settings``, ``ws_stats`` and ``ingest``).
    ``pick`` and ``pool`` are null for a runtime built without a pool."""
    runtime: Runtime = state.runtime
    settings: Settings = state.settings
    hs = runtime.host_status()
    pick = hs["pick"]
    ingest = getattr(state, "ingest", None)  # None in an app whose lifespan has not run
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
        "websocket": state.ws_stats.snapshot(),
        "ingest": ingest.status() if ingest is not None else {"enabled": False, "transports": {}},
        "admission": state.admission.snapshot() if hasattr(state, "admission") else None,
    }
