"""Per-scheme counters since start and a rolling per-second throughput window."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field


@dataclass
class SchemeCounters:
    items: int = 0
    valid: int = 0
    batches: int = 0
    verify_seconds: float = 0.0
    backends: dict[str, int] = field(default_factory=dict)


class Stats:
    """Thread-safe counters fed by the engine after every batch.

    ``window`` seconds of per-second item counts are kept per scheme for the dashboard's
    throughput chart.
    """

    def __init__(self, window: int = 300, clock=time.monotonic):
        self._lock = threading.Lock()
        self._clock = clock
        self.started = clock()
        self.window = window
        self.schemes: dict[str, SchemeCounters] = {}
        self._series: dict[str, deque[list[float]]] = {}

    def record(self, scheme: str, backend: str, items: int, valid: int, seconds: float) -> None:
        now = self._clock()
        sec = int(now)
        with self._lock:
            c = self.schemes.setdefault(scheme, SchemeCounters())
            c.items += items
            c.valid += valid
            c.batches += 1
            c.verify_seconds += seconds
            c.backends[backend] = c.backends.get(backend, 0) + items
            series = self._series.setdefault(scheme, deque())
            if series and series[-1][0] == sec:
                series[-1][1] += items
            else:
                series.append([sec, items])
            while series and series[0][0] < sec - self.window:
                series.popleft()

    def snapshot(self, rate_seconds: int = 10) -> dict:
        """Counters per scheme, with ``rate_per_second`` over the last ``rate_seconds``
        and ``series`` = [[seconds ago, items], ...] over the window."""
        now = self._clock()
        sec = int(now)
        uptime = max(now - self.started, 1e-9)
        out = {}
        with self._lock:
            for name, c in self.schemes.items():
                series = self._series.get(name, deque())
                recent = sum(n for t, n in series if t > sec - rate_seconds)
                out[name] = {
                    "items": c.items, "valid": c.valid, "invalid": c.items - c.valid,
                    "batches": c.batches, "verify_seconds": round(c.verify_seconds, 6),
                    "backends": dict(c.backends),
                    "rate_per_second": recent / min(rate_seconds, uptime),
                    "average_per_second": c.items / uptime,
                    "series": [[sec - t, n] for t, n in series],
                }
        return {"uptime_seconds": round(uptime, 3), "schemes": out}
