"""Per-scheme counters since start, a rolling per-second throughput window, ingest frame
counters, the most recent requests and the latency of the last requests answered, for
/v1/status, the live dashboard and metrics.

Other observers (Prometheus metrics, :mod:`app.api.metrics`) subscribe with
:meth:`Stats.add_listener`, so the engine itself never imports a metrics library.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

log = logging.getLogger("zapverify.stats")


@dataclass
class SchemeCounters:
    items: int = 0
    valid: int = 0
    batches: int = 0
    verify_seconds: float = 0.0
    backends: dict[str, int] = field(default_factory=dict)


@dataclass
class RecentRequest:
    """One answered request, as the dashboard lists it.

    Attributes:
        batch_id: the request's batch id (also its receipt id).
        time: wall-clock time it was answered, seconds since the epoch.
        count / valid: items in it and how many verified.
        schemes: scheme id -> items of that scheme.
        backends: scheme id -> backend that ran it.
        elapsed_ms: time from request to answer, milliseconds.
        source: how it arrived (``http``, ``ws``, ``zap``...).
        receipt: path of its receipt (``/v1/receipts/<id>``), or None when receipts are off.
    """

    batch_id: str
    time: float
    count: int
    valid: int
    schemes: dict[str, int]
    backends: dict[str, str]
    elapsed_ms: float
    source: str
    receipt: str | None


class StatsListener(Protocol):
    """What :meth:`Stats.add_listener` accepts; called outside the stats lock, on the
    thread that recorded the event, so it must be quick and must not raise."""

    def batch(self, scheme: str, backend: str, items: int, valid: int, seconds: float) -> None: ...

    def frame(self, transport: str, outcome: str) -> None: ...

    def shadow(self, scheme: str, backend: str, checked: int, mismatches: int, dropped: int) -> None: ...


class Stats:
    """Thread-safe counters fed by the engine after every batch.

    ``window`` seconds of per-second item counts are kept per scheme for the dashboard's
    throughput chart; the last ``recent`` requests are kept for its batch list, and the
    time to answer of the last ``latency`` requests (at most ``window`` seconds old) for its
    latency percentiles.
    """

    def __init__(self, window: int = 300, recent: int = 20, clock=time.monotonic, latency: int = 1000):
        self._lock = threading.Lock()
        self._clock = clock
        self.started = clock()
        self.window = window
        self.schemes: dict[str, SchemeCounters] = {}
        self._series: dict[str, deque[list[float]]] = {}
        self._frames: dict[str, dict[str, int]] = {}
        self._recent: deque[RecentRequest] = deque(maxlen=recent)
        #: (clock seconds, source, elapsed ms) of the last answered requests.
        self._latency: deque[tuple[float, str, float]] = deque(maxlen=latency)
        self._listeners: list[StatsListener] = []
        self._peers: Callable[[], list[dict]] | None = None

    # ------------------------------------------------------------------ listeners
    def add_listener(self, listener: StatsListener) -> None:
        """Subscribe ``listener`` to every batch and frame from now on (once, however often called)."""
        with self._lock:
            if listener not in self._listeners:
                self._listeners.append(listener)

    def remove_listener(self, listener: StatsListener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _notify(self, method: str, *args) -> None:
        for listener in list(self._listeners):
            fn = getattr(listener, method, None)
            if fn is None:  # a listener written before this event existed
                continue
            try:
                fn(*args)
            except Exception:  # an observer must never fail a verification
                log.exception("stats listener %r failed", listener)

    # ------------------------------------------------------------------ recording
    def record(self, scheme: str, backend: str, items: int, valid: int, seconds: float) -> None:
        """One verified batch: ``items`` of ``scheme`` on ``backend``, ``valid`` of them true,
        in ``seconds`` of verify time."""
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
        self._notify("batch", scheme, backend, items, valid, seconds)

    def record_frame(self, transport: str, outcome: str) -> None:
        """One ingest frame on ``transport`` (``tcp``, ``udp``, ``ws``, ``http-zap``...) with
        ``outcome`` (``accepted``, ``bad_magic``, ``malformed``, ``too_large``...)."""
        with self._lock:
            per = self._frames.setdefault(transport, {})
            per[outcome] = per.get(outcome, 0) + 1
        self._notify("frame", transport, outcome)

    def record_shadow(self, scheme: str, backend: str, checked: int, mismatches: int, dropped: int) -> None:
        """Shadow checks (:mod:`app.engine.verify.shadow`): ``checked`` items of ``scheme``
        verified by ``backend`` re-checked on the CPU reference, ``mismatches`` of them
        contradicted, ``dropped`` sampled items not checked (queue full).  Passed on to the
        listeners only: the checker keeps its own counts (/v1/status)."""
        self._notify("shadow", scheme, backend, checked, mismatches, dropped)

    def record_request(self, request: RecentRequest) -> None:
        """Remember an answered request for the dashboard's recent-batches list and its
        latency percentiles."""
        now = self._clock()
        with self._lock:
            self._recent.append(request)
            self._latency.append((now, request.source, request.elapsed_ms))

    # ------------------------------------------------------------------ reading
    def set_peers(self, peers: Callable[[], list[dict]] | None) -> None:
        """Merge the :meth:`export` of other processes into every :meth:`snapshot` (the
        other uvicorn workers of one server: :mod:`app.api.workers`).  ``peers`` returns
        their exports; it is called on every snapshot and must be quick."""
        self._peers = peers

    def export(self) -> dict:
        """This process's raw state as plain JSON data, for :meth:`snapshot` of another.

        The series keep seconds of ``clock`` (``time.monotonic``: one clock for every
        process of a host), so series of several processes add up second by second.
        """
        with self._lock:
            return {"started": self.started,
                    "schemes": {n: asdict(c) for n, c in self.schemes.items()},
                    "series": {n: [list(p) for p in ser] for n, ser in self._series.items()},
                    "ingest": {t: dict(per) for t, per in self._frames.items()},
                    "recent": [asdict(r) for r in self._recent],
                    "latency": [list(x) for x in self._latency]}

    def snapshot(self, rate_seconds: int = 10) -> dict:
        """Counters per scheme, with ``rate_per_second`` over the last ``rate_seconds``
        and ``series`` = [[seconds ago, items], ...] over the window; ``ingest`` =
        {transport: {outcome: frames}}; ``recent`` = the last requests, newest first;
        ``latency`` = {source: {count, p50_ms, p99_ms, max_ms}} over the last requests
        answered in the window (each process keeps its last ``latency``), with ``all`` for
        every source together; ``workers`` = how many processes these figures cover (see
        :meth:`set_peers`)."""
        parts = [self.export()]
        if self._peers is not None:
            try:
                parts += self._peers()
            except Exception:  # peers are a view; a bad one must not break the page
                log.exception("reading the stats of other workers failed")
        now = self._clock()
        sec = int(now)
        uptime = max(now - min(p["started"] for p in parts), 1e-9)
        counters: dict[str, SchemeCounters] = {}
        per_second: dict[str, dict[int, float]] = {}
        ingest: dict[str, dict[str, int]] = {}
        recent: list[dict] = []
        elapsed: dict[str, list[float]] = {}
        for part in parts:
            for name, c in part["schemes"].items():
                m = counters.setdefault(name, SchemeCounters())
                m.items += c["items"]
                m.valid += c["valid"]
                m.batches += c["batches"]
                m.verify_seconds += c["verify_seconds"]
                for b, n in c["backends"].items():
                    m.backends[b] = m.backends.get(b, 0) + n
            for name, ser in part["series"].items():
                acc = per_second.setdefault(name, {})
                for t, n in ser:
                    if t >= sec - self.window:
                        acc[int(t)] = acc.get(int(t), 0) + n
            for t, per in part["ingest"].items():
                acc_i = ingest.setdefault(t, {})
                for outcome, n in per.items():
                    acc_i[outcome] = acc_i.get(outcome, 0) + n
            recent += part["recent"]
            for t, source, ms in part.get("latency", ()):  # a peer of an older version has none
                if t >= now - self.window:
                    elapsed.setdefault(source, []).append(ms)
        out = {}
        for name, c in counters.items():
            series = sorted(per_second.get(name, {}).items())
            out[name] = {
                "items": c.items, "valid": c.valid, "invalid": c.items - c.valid,
                "batches": c.batches, "verify_seconds": round(c.verify_seconds, 6),
                "backends": dict(c.backends),
                "rate_per_second": sum(n for t, n in series if t > sec - rate_seconds) / min(rate_seconds, uptime),
                "average_per_second": c.items / uptime,
                "series": [[sec - t, n] for t, n in series],
            }
        recent.sort(key=lambda r: r["time"], reverse=True)
        return {"uptime_seconds": round(uptime, 3), "window_seconds": self.window, "workers": len(parts),
                "schemes": out, "ingest": ingest, "recent": recent[: self._recent.maxlen],
                "latency": {**{source: _percentiles(ms) for source, ms in sorted(elapsed.items())},
                            **({"all": _percentiles([x for ms in elapsed.values() for x in ms])} if elapsed else {})}}


def _percentiles(ms: list[float]) -> dict:
    """count, p50, p99 and max of ``ms`` (nearest rank: a value that was observed)."""
    ms = sorted(ms)

    def rank(q: float) -> float:
        return ms[max(math.ceil(q * len(ms)) - 1, 0)]

    return {"count": len(ms), "p50_ms": rank(0.5), "p99_ms": rank(0.99), "max_ms": ms[-1]}


@dataclass
class WsStats:
    """Gauges and counters of the WebSocket endpoint (/v1/ws/verify), for /v1/status and
    /metrics; the runtime holds one per process.

    ``in_flight_peak`` is the largest number of requests one connection has had in flight;
    it never exceeds ``ws_max_in_flight``.
    """

    connections: int = 0
    connections_total: int = 0
    in_flight: int = 0
    in_flight_peak: int = 0
    messages_total: int = 0
    errors_total: int = 0

    def snapshot(self) -> dict:
        return dict(self.__dict__)
