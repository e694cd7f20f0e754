"""Prometheus metrics of zapverify: definitions, recording, exposition.

Every metric is defined here, once per process.  Batches and ingest frames are recorded by
:data:`LISTENER`, which the app subscribes to the runtime's :class:`app.engine.stats.Stats`
(the engine itself never imports prometheus_client); HTTP requests by the
:class:`HttpMetrics` middleware; gauges (pool bytes, backend availability) are refreshed
from the engine every second and at each scrape.

Several uvicorn workers (``zapverify serve --workers N``) each keep their own values; for
``/metrics`` to report the sum over all of them, prometheus_client's multiprocess mode is
used whenever ``PROMETHEUS_MULTIPROC_DIR`` is set in the environment *before* this module
is first imported (``zapverify serve`` sets and empties it for N > 1).  In that mode:
counters and histograms are summed over every worker that ever ran since the directory
was emptied, ``zapverify_pool_bytes`` is summed over live workers (each has its own pool)
and ``zapverify_backend_available`` is the minimum over live workers (1 only if every
worker can use the backend).  Files of workers that died are reaped at each scrape.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import re
import time
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.workers import pid_alive

log = logging.getLogger("zapverify.metrics")

ENV_DIR = "PROMETHEUS_MULTIPROC_DIR"
#: Every name here is a classic one, so the text is format 0.0.4, which every scraper reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def multiprocess_dir() -> str | None:
    """The multiprocess directory named by the environment, or None (single-process mode)."""
    return os.environ.get(ENV_DIR) or os.environ.get(ENV_DIR.lower())


#: Seconds; spans a tiny Ed25519 batch on a GPU to a large SLH-DSA-s batch on one CPU core.
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0, 120.0)
#: Items per batch, powers of four up to the default ``max_items`` (65536).
SIZE_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)

SIGNATURES = Counter("zapverify_signatures", "Signatures verified, by scheme, backend and verdict (valid|invalid).",
                     ["scheme", "backend", "result"])
BATCH_DURATION = Histogram("zapverify_batch_duration_seconds", "Verify time of one single-scheme batch.",
                           ["scheme", "backend"], buckets=DURATION_BUCKETS)
BATCH_SIZE = Histogram("zapverify_batch_size", "Items per single-scheme batch.", ["scheme"], buckets=SIZE_BUCKETS)
POOL_BYTES = Gauge("zapverify_pool_bytes", "UMA pool bytes by state (in_use|free); their sum is the capacity.",
                   ["state"], multiprocess_mode="livesum")
INGEST_FRAMES = Counter("zapverify_ingest_frames", "ZAP frames received by ingest, by transport and outcome.",
                        ["transport", "outcome"])
BACKEND_AVAILABLE = Gauge("zapverify_backend_available",
                          "1 when the backend passed its known-answer self-test for the scheme, else 0.",
                          ["backend", "scheme"], multiprocess_mode="livemin")
SHADOW_CHECKED = Counter("zapverify_shadow_checked_items",
                         "Items an accelerated backend verified that the CPU reference verified again (shadow "
                         "check), by scheme and accelerated backend.", ["scheme", "backend"])
SHADOW_MISMATCHES = Counter("zapverify_shadow_mismatches",
                            "Shadow-checked items whose accelerated verdict the CPU reference contradicted; any "
                            "increase degrades the scheme on that backend.", ["scheme", "backend"])
SHADOW_DROPPED = Counter("zapverify_shadow_dropped_items",
                         "Sampled items the shadow checker dropped unchecked because its queue was full.")
RECEIPT_STORE_UP = Gauge("zapverify_receipt_store_up",
                         "1 while the receipt store can be written, 0 while it is down (writes refused with 503 "
                         "STORE_UNAVAILABLE); absent when receipts are off.", multiprocess_mode="livemin")
RECEIPT_STORE_FAILURES = Counter("zapverify_receipt_store_failures",
                                 "Receipt store writes and probes that failed for a fault of the store, by reason "
                                 "(disk_full|unreachable|read_only|io_error|write_failed).", ["reason"])
ADMISSION_IN_FLIGHT = Gauge("zapverify_admission_in_flight",
                            "Verify work admitted and not yet answered, by unit (requests|items|bytes).", ["unit"],
                            multiprocess_mode="livesum")
ADMISSION_WAIT = Gauge("zapverify_admission_estimated_wait_seconds",
                       "Seconds of verify work in flight (items x each scheme's measured seconds per item): the "
                       "wait a new request is estimated to have; past ZAPVERIFY_ADMISSION_MAX_WAIT_SECONDS new "
                       "requests are refused.", multiprocess_mode="livemax")
ADMISSION_REFUSALS = Counter("zapverify_admission_refusals",
                             "Verify requests refused 503 OVERLOADED by admission control, by the bound they hit "
                             "(items|bytes|share|wait).", ["reason"])
HTTP_REQUESTS = Counter("zapverify_http_requests", "HTTP requests answered, by method, route template and status.",
                        ["method", "route", "status"])
HTTP_DURATION = Histogram("zapverify_http_request_duration_seconds",
                          "Time from request to the end of the response body, by method and route template.",
                          ["method", "route"], buckets=DURATION_BUCKETS)
HTTP_IN_PROGRESS = Gauge("zapverify_http_requests_in_progress", "HTTP requests being served.", ["method"],
                         multiprocess_mode="livesum")


class _Listener:
    """Records the engine's batches, ingest frames and shadow checks (see :class:`app.engine.stats.StatsListener`)."""

    def batch(self, scheme: str, backend: str, items: int, valid: int, seconds: float) -> None:
        if valid:
            SIGNATURES.labels(scheme, backend, "valid").inc(valid)
        if items - valid:
            SIGNATURES.labels(scheme, backend, "invalid").inc(items - valid)
        BATCH_DURATION.labels(scheme, backend).observe(seconds)
        BATCH_SIZE.labels(scheme).observe(items)

    def frame(self, transport: str, outcome: str) -> None:
        INGEST_FRAMES.labels(transport, outcome).inc()

    def shadow(self, scheme: str, backend: str, checked: int, mismatches: int, dropped: int) -> None:
        # inc(0) still creates the series: a scrape shows 0 checked for a scheme once sampled.
        if checked or mismatches:
            SHADOW_CHECKED.labels(scheme, backend).inc(checked)
            SHADOW_MISMATCHES.labels(scheme, backend).inc(mismatches)
        if dropped:
            SHADOW_DROPPED.inc(dropped)


#: The one listener; :meth:`Stats.add_listener` ignores a second subscription of it.
LISTENER = _Listener()


def refresh_gauges(runtime: Any, admission: Any = None) -> None:
    """Set the pool and backend-availability gauges from ``runtime`` (an
    :class:`app.engine.runtime.Runtime`: its engine's routes and its pool), and the admission
    gauges and refusal counts from ``admission`` (an :class:`app.engine.admission.Admission`).

    The pool gauges are only set when the runtime has a UMA pool (``runtime.pool``).
    """
    if admission is not None:
        snap = admission.snapshot()
        for unit in ("requests", "items", "bytes"):
            ADMISSION_IN_FLIGHT.labels(unit).set(snap[f"{unit}_in_flight"])
        ADMISSION_WAIT.set(snap["estimated_wait_seconds"])
        # Admission counts refusals itself (the engine never imports prometheus_client).
        seen = _refusals_seen.setdefault(id(admission), {})
        for reason, n in snap["refused_by"].items():
            if n > seen.get(reason, 0) or reason not in seen:
                ADMISSION_REFUSALS.labels(reason).inc(n - seen.get(reason, 0))
                seen[reason] = n
    for scheme, route in runtime.engine.routes.items():
        for backend, ok in route.selftest.items():
            BACKEND_AVAILABLE.labels(backend, scheme).set(1 if ok else 0)
    pool = runtime.pool
    if pool is not None:
        stats = pool.stats()
        POOL_BYTES.labels("in_use").set(stats["in_use_bytes"])
        POOL_BYTES.labels("free").set(stats["capacity_bytes"] - stats["in_use_bytes"])
    store = getattr(runtime, "store", None)
    if store is not None:
        health = store.health
        RECEIPT_STORE_UP.set(1 if health.up else 0)
        # The store counts failures itself (the engine never imports prometheus_client);
        # the counter takes what was added since the last refresh.
        seen = _store_failures_seen.get(id(health), {})
        for reason, n in list(health.failures.items()):
            if n > seen.get(reason, 0):
                RECEIPT_STORE_FAILURES.labels(reason).inc(n - seen.get(reason, 0))
        _store_failures_seen.clear()  # only the current store's counts are kept
        _store_failures_seen[id(health)] = dict(health.failures)


#: ``id(StoreHealth)`` → reason → failures already added to :data:`RECEIPT_STORE_FAILURES`.
_store_failures_seen: dict[int, dict[str, int]] = {}
#: ``id(Admission)`` → reason → refusals already added to :data:`ADMISSION_REFUSALS`.
_refusals_seen: dict[int, dict[str, int]] = {}


async def refresh_forever(runtime: Any, admission: Any = None, interval: float = 1.0) -> None:
    """Keep this worker's gauges current (every worker must: a scrape reads all of them), and
    probe the receipt store (rate-limited by the store, in a thread: a probe of an unreachable
    database waits up to its probe timeout), so a stopped database turns /readyz and
    ``zapverify_receipt_store_up`` to down without waiting for a request to fail."""
    while True:
        try:
            store = getattr(runtime, "store", None)
            if store is not None:
                await asyncio.to_thread(store.health.check)
            refresh_gauges(runtime, admission)
        except Exception:  # a gauge must never take the server down
            log.exception("refreshing metrics gauges failed")
        await asyncio.sleep(interval)


_GAUGE_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db$")


def reap_dead_workers(path: str) -> list[int]:
    """Drop the live-gauge files of workers that have exited; returns their pids.

    uvicorn has no child-exit hook (gunicorn's ``child_exit``), so the scrape does it.
    """
    dead = set()
    for f in glob.glob(os.path.join(path, "gauge_live*.db")):
        m = _GAUGE_FILE.search(os.path.basename(f))
        if m and not pid_alive(int(m.group(1))):
            dead.add(int(m.group(1)))
    for pid in dead:
        multiprocess.mark_process_dead(pid, path)
    return sorted(dead)


def clear_multiprocess_dir(path: str) -> None:
    """Create ``path`` and delete the value files a previous server left there (call before
    the workers start: counters of an earlier run must not be added to this one's)."""
    os.makedirs(path, exist_ok=True)
    for f in glob.glob(os.path.join(path, "*.db")):
        os.remove(f)


def exposition(runtime: Any, admission: Any = None) -> tuple[bytes, str]:
    """The text exposition format of every zapverify metric, and its content type
    (``admission``: see :func:`refresh_gauges`).

    In multiprocess mode the values of every worker are merged (see the module doc).
    """
    refresh_gauges(runtime, admission)
    path = multiprocess_dir()
    if path:
        reap_dead_workers(path)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=path)
    else:
        registry = REGISTRY
    return generate_latest(registry), CONTENT_TYPE


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class HttpMetrics:
    """ASGI middleware counting HTTP requests and their duration per route template.

    The route label is the template (``/v1/receipts/{batch_id}``), so ids never become
    label values; a path no route matches is labelled ``<unmatched>``.
    """

    def __init__(self, app: ASGIApp):
        self.app = app
        self._templates: list[tuple[re.Pattern, str]] | None = None

    def _route(self, scope: Scope) -> str:
        route = scope.get("route")
        if route is not None and hasattr(route, "path"):
            return route.path
        # Refused before routing (BodyLimit's 413) or no route: match the path against the
        # templates of the OpenAPI document, the app's public list of its routes.
        if self._templates is None:
            openapi = getattr(scope.get("app"), "openapi", None)
            paths = openapi().get("paths", {}) if callable(openapi) else {}
            self._templates = [(re.compile("^" + "[^/]+".join(map(re.escape, re.split(r"\{[^}]*\}", t))) + "$"), t)
                               for t in paths]
        path = scope.get("path", "")
        return next((t for rx, t in self._templates if rx.match(path)), "<unmatched>")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        method = scope.get("method", "GET")
        if method not in _METHODS:  # clients may send any token; labels must stay bounded
            method = "other"
        status = 500
        t0 = time.perf_counter()

        async def observed(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
            await send(msg)

        HTTP_IN_PROGRESS.labels(method).inc()
        try:
            await self.app(scope, receive, observed)
        finally:
            HTTP_IN_PROGRESS.labels(method).dec()
            route = self._route(scope)
            HTTP_REQUESTS.labels(method, route, str(status)).inc()
            HTTP_DURATION.labels(method, route).observe(time.perf_counter() - t0)
