"""One uvicorn worker's side of the exchange through which the workers of one server show
the whole server (:mod:`app.api.workers` says where the directory is and prepares it).

Every second a worker writes its :meth:`app.engine.stats.Stats.export` and its UMA pool
statistics to ``<dir>/<pid>.json`` (write to a temporary name, then rename: a reader never
sees half a file) and reads the files of the others.  A file is used only while its worker
is alive and the file is younger than :data:`STALE_SECONDS`.  The runtime
(:mod:`app.engine.runtime`) holds one per worker process when there are several.

This module imports no web framework.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("zapverify.workers")

#: A worker's file older than this (seconds) is ignored: that worker is stuck or gone.
STALE_SECONDS = 5.0


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (signal 0 probes without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkerExchange:
    """One worker's side of the exchange.

    Args:
        path: the exchange directory (created if absent).
        runtime: this worker's :class:`app.engine.runtime.Runtime` (its stats and pool).
        pid: this worker's process id.
    """

    def __init__(self, path: Path, runtime: Any, pid: int | None = None):
        self.path = Path(path)
        self.runtime = runtime
        self.pid = pid or os.getpid()
        self.path.mkdir(parents=True, exist_ok=True)

    def _pool_stats(self) -> dict | None:
        pool = self.runtime.pool
        return pool.stats() if pool is not None else None

    def publish(self) -> None:
        """Write this worker's stats and pool (OSError is logged, never raised)."""
        data = {"pid": self.pid, "time": time.time(), "stats": self.runtime.stats.export(),
                "pool": self._pool_stats()}
        tmp = self.path / f".{self.pid}.tmp"
        try:
            tmp.write_text(json.dumps(data))
            tmp.replace(self.path / f"{self.pid}.json")
        except OSError as exc:
            log.warning("cannot publish worker stats to %s: %s", self.path, exc)

    async def publish_forever(self, interval: float = 1.0) -> None:
        while True:
            await asyncio.to_thread(self.publish)
            await asyncio.sleep(interval)

    def withdraw(self) -> None:
        """Remove this worker's file (at shutdown)."""
        (self.path / f"{self.pid}.json").unlink(missing_ok=True)

    def peers(self) -> list[dict]:
        """The latest files of the other live workers: ``[{"pid", "time", "stats", "pool"}]``."""
        out = []
        now = time.time()
        for f in self.path.glob("*.json"):
            try:
                pid = int(f.stem)
            except ValueError:
                continue
            if pid == self.pid or not pid_alive(pid):
                continue
            try:
                data = json.loads(f.read_text())
            except (OSError, ValueError):
                continue  # being replaced, or gone
            if now - data.get("time", 0) <= STALE_SECONDS:
                out.append(data)
        return out

    def peer_stats(self) -> list[dict]:
        """:meth:`peers`' stats exports, for :meth:`app.engine.stats.Stats.set_peers`."""
        return [p["stats"] for p in self.peers()]
