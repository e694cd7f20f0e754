"""What the uvicorn workers of one server tell each other, so the dashboard and /v1/status
show the whole server rather than the one worker a connection happened to reach.

Every second each worker writes its :meth:`app.engine.stats.Stats.export` and its UMA pool
statistics to ``<dir>/<pid>.json`` (write to a temporary name, then rename: a reader never
sees half a file) and reads the files of the others.  A file is used only while its worker
is alive and the file is younger than :data:`STALE_SECONDS`.  ``<dir>`` is
``$PROMETHEUS_MULTIPROC_DIR/zapverify-workers``: the directory ``zapverify serve`` prepares
for several workers; with one worker there is nothing to exchange.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

# One worker's side of the exchange is a part of its runtime (app/engine/workers.py).
from app.engine.workers import STALE_SECONDS as STALE_SECONDS
from app.engine.workers import WorkerExchange as WorkerExchange
from app.engine.workers import pid_alive as pid_alive

SUBDIR = "zapverify-workers"


def exchange_dir(multiprocess_dir: str | None) -> Path | None:
    """The exchange directory under ``multiprocess_dir``, or None in single-process mode."""
    return Path(multiprocess_dir) / SUBDIR if multiprocess_dir else None


def clear(multiprocess_dir: str) -> None:
    """Create ``multiprocess_dir`` and remove the files of an earlier server there: its
    Prometheus value files (:func:`clear_values`) and the workers' exchange files (called by
    ``zapverify serve`` before the workers start)."""
    clear_values(multiprocess_dir)
    shutil.rmtree(Path(multiprocess_dir) / SUBDIR, ignore_errors=True)


def clear_values(multiprocess_dir: str) -> None:
    """Create ``multiprocess_dir`` and delete the Prometheus value files (``*.db``) an earlier
    server left there: counters of an earlier run must not be added to this one's.  Here,
    not in :mod:`app.api.metrics`: importing that defines metrics, whose files the calling
    process would then hold (see :func:`app.api.metrics.clear_multiprocess_dir`)."""
    os.makedirs(multiprocess_dir, exist_ok=True)
    for f in Path(multiprocess_dir).glob("*.db"):
        f.unlink(missing_ok=True)


_SUMMED = ("requested_bytes", "capacity_bytes", "in_use_bytes", "reserved_bytes", "free_chunk_bytes",
           "high_water_bytes", "buffers_in_use", "acquired_total", "released_total", "waits_total", "waiting",
           "exhaustions_total", "misuse_total")


def merge_pools(pools: list[dict | None]) -> dict | None:
    """The pools of several workers as one: byte and event counts added, per class and
    ``large`` added, ``workers`` = how many pools; None when no worker has a pool.
    (High water is the sum of each worker's high water: an upper bound of the server's.)"""
    live = [p for p in pools if p]
    if not live:
        return None
    if len(live) == 1:
        return {**live[0], "workers": 1}
    out = dict(live[0])
    for key in _SUMMED:
        if all(isinstance(p.get(key), (int, float)) for p in live):
            out[key] = sum(p[key] for p in live)
    out["clamped_by"] = sorted({c for p in live for c in p.get("clamped_by", [])})
    classes: dict[int, dict[str, Any]] = {}
    for p in live:
        for c in p.get("classes", []):
            acc = classes.setdefault(c["size_bytes"], {k: 0 for k in c} | {"size_bytes": c["size_bytes"]})
            for k, v in c.items():
                if k != "size_bytes" and isinstance(v, (int, float)):
                    acc[k] += v
    out["classes"] = [classes[k] for k in sorted(classes)]
    if all("large" in p for p in live):
        out["large"] = {k: sum(p["large"].get(k, 0) for p in live) for k in live[0]["large"]}
    out["workers"] = len(live)
    return out
