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

prometheus_client's multiprocess collector has no ``process_*`` or ``python_*`` series (its
own collectors read the process that answers the scrape).  So in that mode each worker
copies its own into multiprocess metrics of the standard names every second
(:func:`refresh_process`): ``process_resident_memory_bytes``,
``process_virtual_memory_bytes`` and ``process_open_fds`` are summed over the live workers
(what the server holds; the supervisor process that only restarts workers is not
counted), ``process_max_fds`` and ``process_start_time_seconds`` are the minimum,
``process_cpu_seconds_total`` and ``python_gc_*_total`` are counters summed over every
worker that ran (they survive a worker's restart, so ``rate()`` stays right) and
``python_info`` is one series; ``zapverify_worker_processes`` counts the live workers.  In
single-process mode prometheus_client's default collectors export the same names.

The ``_created`` series of counters and histograms are off (``disable_created_metrics``):
nothing reads them and they double the series of every counter.
"""

from __future__ import annotations

import asyncio
import gc
import glob
import json
import logging
import os
import platform
import re
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__, build
from app.api import workers
from app.api.workers import pid_alive
from app.wire import zap

log = logging.getLogger("zapverify.metrics")

ENV_DIR = "PROMETHEUS_MULTIPROC_DIR"
#: Every name here is a classic one, so the text is format 0.0.4, which every scraper reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def multiprocess_dir() -> str | None:
    """The multiprocess directory named by the environment, or None (single-process mode)."""
    return os.environ.get(ENV_DIR) or os.environ.get(ENV_DIR.lower())


# A metric without labels opens its value file when it is defined, below: the directory must
# exist by then (compose names one under a fresh tmpfs).
if multiprocess_dir():
    os.makedirs(multiprocess_dir() or ".", exist_ok=True)
# Before any metric is defined: no ``_created`` sample on counters and histograms.
disable_created_metrics()

#: Seconds; spans a tiny Ed25519 batch on a GPU to a large SLH-DSA-s batch on one CPU core.
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0, 120.0)
#: Items per batch, powers of four up to the default ``max_items`` (65536).
SIZE_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)

SIGNATURES = Counter("zapverify_signatures", "Signatures verified, by scheme, backend and verdict (valid|invalid).",
                     ["scheme", "backend", "result"])
BATCH_DURATION = Histogram("zapverify_batch_duration_seconds", "Verify time of one single-scheme batch.",
                           ["scheme", "backend"], buckets=DURATION_BUCKETS)
BATCH_ITEMS = Histogram("zapverify_batch_items", "Items per single-scheme batch.", ["scheme"], buckets=SIZE_BUCKETS)
#: The same histogram under its name before the unit suffix (0.1.0), kept one release so that
#: dashboards and rules written against it keep working while they move; removed in 0.2.0.
BATCH_SIZE_DEPRECATED = Histogram("zapverify_batch_size", "Deprecated (removed in 0.2.0): zapverify_batch_items.",
                                  ["scheme"], buckets=SIZE_BUCKETS)
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
                       "Seconds a new client's average request is estimated to take to finish under fair sharing "
                       "(the work in flight and queued, from the measured cost model): the autoscaling signal; "
                       "requests that cannot finish within their deadline are refused.", multiprocess_mode="livemax")
ADMISSION_QUEUED = Gauge("zapverify_admission_queued",
                         "Verify requests waiting in the admission queue, by unit (requests|work_seconds).", ["unit"],
                         multiprocess_mode="livesum")
ADMISSION_QUEUE_WAIT = Counter("zapverify_admission_queue_wait_seconds",
                               "Seconds admitted verify requests waited in the admission queue (with "
                               "zapverify_admission_queue_admitted_total: the mean wait).")
ADMISSION_QUEUE_ADMITTED = Counter("zapverify_admission_queue_admitted",
                                   "Verify requests admitted through the queue (waiting or not).")
ADMISSION_DEADLINE_MISSES = Counter("zapverify_admission_deadline_misses",
                                    "Admitted verify requests answered after their deadline.")
ADMISSION_REFUSALS = Counter("zapverify_admission_refusals",
                             "Verify requests refused 503 OVERLOADED by admission control, by reason "
                             "(items|bytes|share|deadline|queue|expired): the one overload count.", ["reason"])
HTTP_REQUESTS = Counter("zapverify_http_requests", "HTTP requests answered, by method, route template and status.",
                        ["method", "route", "status"])
HTTP_DURATION = Histogram("zapverify_http_request_duration_seconds",
                          "Time from request to the end of the response body, by method and route template.",
                          ["method", "route"], buckets=DURATION_BUCKETS)
HTTP_IN_PROGRESS = Gauge("zapverify_http_requests_in_progress", "HTTP requests being served.", ["method"],
                         multiprocess_mode="livesum")
HTTP_ERRORS = Counter("zapverify_http_errors",
                      "HTTP requests answered with an error (status >= 400), by route template and error code: "
                      "the code of the JSON error or ZAP error frame (OVERLOADED, UNAUTHORIZED, ...), HTTP_<status> "
                      "for an answer that carries none.", ["route", "code"])
STORE_WRITE = Histogram("zapverify_receipt_store_write_duration_seconds",
                        "Time to write a request's receipts durably, as the request waits for it (group commit "
                        "included), by outcome (ok|error; a write refused at once while the store is down is not "
                        "timed).", ["outcome"], buckets=DURATION_BUCKETS)
READY = Gauge("zapverify_ready",
              "1 while /readyz would answer 200 (the engine's self-test passed and the receipt store, when "
              "receipts are on, is up), else 0; the minimum over live workers.", multiprocess_mode="livemin")
BUILD_INFO = Gauge("zapverify_build_info",
                   "Always 1: the version, the source commit (unknown outside a git checkout) and the backends "
                   "of this server, in order of preference.", ["version", "commit", "backends"],
                   multiprocess_mode="livemax")
WORKER_PROCESSES = Gauge("zapverify_worker_processes", "Live worker processes of this server.",
                         multiprocess_mode="livesum")
WS_CONNECTIONS = Gauge("zapverify_websocket_connections", "Open WebSocket connections (/v1/ws/verify).",
                       multiprocess_mode="livesum")
WS_IN_FLIGHT = Gauge("zapverify_websocket_requests_in_flight",
                     "WebSocket requests read and not yet answered, over every connection.",
                     multiprocess_mode="livesum")
WS_MESSAGES = Counter("zapverify_websocket_messages", "WebSocket messages (verify requests) received.")
WS_ERRORS = Counter("zapverify_websocket_errors", "WebSocket requests answered with an error (or closing the "
                    "connection when the error could not name its request).")

# Multiprocess mode only (module doc): each worker's process and Python series under the
# standard names.  registry=None: the default registry already has collectors of these names,
# which single-process mode exports.
_PROCESS_GAUGES = {
    "process_resident_memory_bytes": Gauge("process_resident_memory_bytes", "Resident memory size in bytes, "
                                           "summed over the live workers.", registry=None,
                                           multiprocess_mode="livesum"),
    "process_virtual_memory_bytes": Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes, summed "
                                          "over the live workers.", registry=None, multiprocess_mode="livesum"),
    "process_open_fds": Gauge("process_open_fds", "Open file descriptors, summed over the live workers.",
                              registry=None, multiprocess_mode="livesum"),
    "process_max_fds": Gauge("process_max_fds", "Maximum open file descriptors of one worker (the lowest).",
                             registry=None, multiprocess_mode="livemin"),
    "process_start_time_seconds": Gauge("process_start_time_seconds", "Start time of the oldest live worker, "
                                        "seconds since the Unix epoch.", registry=None, multiprocess_mode="livemin"),
}
_PROCESS_CPU = Counter("process_cpu_seconds", "Total user and system CPU time spent in seconds, summed over every "
                       "worker that ran.", registry=None)
_GC = {key: Counter(f"python_gc_{name}", text, ["generation"], registry=None) for key, name, text in (
    ("collected", "objects_collected", "Objects collected during gc, summed over every worker that ran."),
    ("uncollectable", "objects_uncollectable", "Uncollectable objects found during GC, summed over every worker."),
    ("collections", "collections", "Number of times this generation was collected, summed over every worker."))}
_PYTHON_INFO = Gauge("python_info", "Python platform information.",
                     ["implementation", "major", "minor", "patchlevel", "version"], registry=None,
                     multiprocess_mode="livemax")


class _Listener:
    """Records the engine's batches, ingest frames and shadow checks (see :class:`app.engine.stats.StatsListener`)."""

    def batch(self, scheme: str, backend: str, items: int, valid: int, seconds: float) -> None:
        if valid:
            SIGNATURES.labels(scheme, backend, "valid").inc(valid)
        if items - valid:
            SIGNATURES.labels(scheme, backend, "invalid").inc(items - valid)
        BATCH_DURATION.labels(scheme, backend).observe(seconds)
        BATCH_ITEMS.labels(scheme).observe(items)
        BATCH_SIZE_DEPRECATED.labels(scheme).observe(items)

    def frame(self, transport: str, outcome: str) -> None:
        INGEST_FRAMES.labels(transport, outcome).inc()

    def shadow(self, scheme: str, backend: str, checked: int, mismatches: int, dropped: int) -> None:
        # inc(0) still creates the series: a scrape shows 0 checked for a scheme once sampled.
        if checked or mismatches:
            SHADOW_CHECKED.labels(scheme, backend).inc(checked)
            SHADOW_MISMATCHES.labels(scheme, backend).inc(mismatches)
        if dropped:
            SHADOW_DROPPED.inc(dropped)

    def store_write(self, receipts: int, seconds: float, ok: bool) -> None:
        """A receipt store write (:meth:`app.engine.receipts.store.ReceiptStore.add_listener`)."""
        STORE_WRITE.labels("ok" if ok else "error").observe(seconds)


#: The one listener; :meth:`Stats.add_listener` ignores a second subscription of it.
LISTENER = _Listener()


#: Read once: the commit a running server was started from (app/build.py).
COMMIT = build.commit()


class _Totals:
    """What running totals kept elsewhere have already added to Prometheus counters.

    The engine, the stores and the WebSocket endpoint count in plain numbers (they never
    import prometheus_client); each refresh adds to a counter what its total gained since the
    last one.  Totals are per owner object: a new ``Admission`` or ``StoreHealth`` (a test's,
    a restarted store's) starts from zero, and an object that reuses a dead one's ``id`` is
    not mistaken for it.  Thread-safe: the refresh task and a scrape's thread both call.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owners: dict[int, tuple[weakref.ref[Any], dict[Hashable, float]]] = {}

    def add(self, owner: Any, totals: Iterable[tuple[Hashable, float]],
            counter: Callable[[Any], Any]) -> None:
        """Add to ``counter(key)`` what each ``(key, total)`` of ``owner`` gained; a key seen
        for the first time creates its series (at its total, possibly 0)."""
        with self._lock:
            ref, seen = self._owners.get(id(owner), (None, {}))
            if ref is None or ref() is not owner:
                self._owners = {k: v for k, v in self._owners.items() if v[0]() is not None}
                seen = {}
                self._owners[id(owner)] = (weakref.ref(owner), seen)
            for key, n in totals:
                if key not in seen or n > seen[key]:
                    counter(key).inc(n - seen.get(key, 0))
                    seen[key] = n


_TOTALS = _Totals()


class _ProcessMirror:
    """Copies this worker's process and Python series into the multiprocess metrics of the
    same names (module doc); the counters get what was added since the last copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._collector = ProcessCollector(registry=None)
        self._cpu = 0.0
        self._info = False

    def update(self) -> None:
        with self._lock:  # the refresh task and a scrape's thread may both call
            for family in self._collector.collect():
                for s in family.samples:
                    if s.name == "process_cpu_seconds_total":
                        if s.value > self._cpu:
                            _PROCESS_CPU.inc(s.value - self._cpu)
                            self._cpu = s.value
                    elif s.name in _PROCESS_GAUGES:
                        _PROCESS_GAUGES[s.name].set(s.value)
            _TOTALS.add(self, (((key, gen), stat[key]) for gen, stat in enumerate(gc.get_stats()) for key in _GC),
                        lambda k: _GC[k[0]].labels(str(k[1])))
            if not self._info:
                major, minor, patch = platform.python_version_tuple()
                _PYTHON_INFO.labels(platform.python_implementation(), major, minor, patch,
                                    platform.python_version()).set(1)
                self._info = True


_PROCESS = _ProcessMirror()


def refresh_process() -> None:
    """In multiprocess mode, copy this worker's ``process_*`` and ``python_*`` series and count
    it in ``zapverify_worker_processes`` (module doc); in single-process mode only the latter."""
    WORKER_PROCESSES.set(1)
    if multiprocess_dir():
        _PROCESS.update()


def refresh_gauges(runtime: Any, admission: Any = None, ws: Any = None) -> None:
    """Set the pool and backend-availability gauges from ``runtime`` (an
    :class:`app.engine.runtime.Runtime`: its engine's routes and its pool), and the admission
    gauges and refusal counts from ``admission`` (an :class:`app.engine.admission.Admission`),
    the WebSocket ones from ``ws`` (:class:`app.engine.stats.WsStats`), readiness, build
    info and this worker's process series (:func:`refresh_process`).

    The pool gauges are only set when the runtime has a UMA pool (``runtime.pool``).
    """
    refresh_process()
    _refresh_build_info(runtime)
    if ws is not None:
        WS_CONNECTIONS.set(ws.connections)
        WS_IN_FLIGHT.set(ws.in_flight)
        _TOTALS.add(ws, ((WS_MESSAGES, ws.messages_total), (WS_ERRORS, ws.errors_total)), lambda c: c)
    if admission is not None:
        snap = admission.snapshot()
        for unit in ("requests", "items", "bytes"):
            ADMISSION_IN_FLIGHT.labels(unit).set(snap[f"{unit}_in_flight"])
        ADMISSION_WAIT.set(snap["estimated_wait_seconds"])
        ADMISSION_QUEUED.labels("requests").set(snap["queued"])
        ADMISSION_QUEUED.labels("work_seconds").set(snap["queued_work"])
        _TOTALS.add(admission, [*snap["refused_by"].items(), (ADMISSION_QUEUE_WAIT, snap["wait_seconds_total"]),
                                (ADMISSION_QUEUE_ADMITTED, snap["waited_total"]),
                                (ADMISSION_DEADLINE_MISSES, snap["deadline_missed_total"])],
                    lambda key: key if not isinstance(key, str) else ADMISSION_REFUSALS.labels(key))
    for scheme, route in runtime.engine.routes.items():
        for backend, ok in route.selftest.items():
            BACKEND_AVAILABLE.labels(backend, scheme).set(1 if ok else 0)
    pool = runtime.pool
    if pool is not None:
        stats = pool.stats()
        POOL_BYTES.labels("in_use").set(stats["in_use_bytes"])
        POOL_BYTES.labels("free").set(stats["capacity_bytes"] - stats["in_use_bytes"])
    store = runtime.store
    READY.set(1 if runtime.engine.ready and (store is None or store.health.up) else 0)
    if store is not None:
        health = store.health
        RECEIPT_STORE_UP.set(1 if health.up else 0)
        _TOTALS.add(health, list(health.failures.items()), RECEIPT_STORE_FAILURES.labels)


#: The label values :data:`BUILD_INFO` was last set with.
_build_info: list[tuple[str, str, str]] = []


def _refresh_build_info(runtime: Any) -> None:
    labels = (__version__, COMMIT, ",".join(b.name for b in runtime.engine.backends))
    if _build_info != [labels]:
        for old in _build_info:
            BUILD_INFO.remove(*old)
        BUILD_INFO.labels(*labels).set(1)
        _build_info[:] = [labels]


async def refresh_forever(runtime: Any, admission: Any = None, interval: float = 1.0, ws: Any = None) -> None:
    """Keep this worker's gauges current (every worker must: a scrape reads all of them), and
    probe the receipt store (rate-limited by the store, in a thread: a probe of an unreachable
    database waits up to its probe timeout), so a stopped database turns /readyz and
    ``zapverify_receipt_store_up`` to down without waiting for a request to fail."""
    while True:
        try:
            store = runtime.store
            if store is not None:
                await asyncio.to_thread(store.health.check)
            refresh_gauges(runtime, admission, ws)
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
    the workers start: counters of an earlier run must not be added to this one's).

    ``zapverify serve`` calls :func:`app.api.workers.clear` instead, which does the same
    without importing this module: a process that imports it opens value files of its own
    (every metric without labels), and the supervisor's would count as a live worker's
    (``zapverify_ready``, a minimum, would read 0)."""
    workers.clear_values(path)


def exposition(runtime: Any, admission: Any = None, ws: Any = None) -> tuple[bytes, str]:
    """The text exposition format of every zapverify metric, and its content type
    (``admission``, ``ws``: see :func:`refresh_gauges`).

    In multiprocess mode the values of every worker are merged (see the module doc).
    """
    refresh_gauges(runtime, admission, ws)
    path = multiprocess_dir()
    if path:
        reap_dead_workers(path)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=path)
    else:
        registry = REGISTRY
    return generate_latest(registry), CONTENT_TYPE


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: Bytes of an error answer's body read for its code (an error body is a few hundred).
_ERROR_BODY_LIMIT = 64 * 1024
_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


def error_code(status: int, content_type: str, body: bytes) -> str:
    """The error code of an error answer: the ``error.code`` of its JSON body or the code of
    its ZAP error frame, else ``HTTP_<status>`` (never an unbounded label value)."""
    code = None
    try:
        if content_type.startswith("application/json"):
            code = json.loads(body)["error"]["code"]
        elif content_type.startswith(zap.CONTENT_TYPE):
            code = zap.decode_error(body).name
    except Exception:  # noqa: BLE001 - not an error body of ours: counted by status
        code = None
    return code if isinstance(code, str) and _CODE.fullmatch(code) else f"HTTP_{status}"


class HttpMetrics:
    """ASGI middleware counting HTTP requests and their duration per route template, and
    error answers by code (:data:`HTTP_ERRORS`: whoever answered the error, a route, an
    exception handler or a middleware, the code is read back from the answer's body).

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
        content_type = ""
        error_body: bytearray | None = None
        t0 = time.perf_counter()

        async def observed(msg: Message) -> None:
            nonlocal status, content_type, error_body
            if msg["type"] == "http.response.start":
                status = msg["status"]
                if status >= 400:
                    error_body = bytearray()
                    content_type = next((v.decode("latin-1").lower() for k, v in msg.get("headers", ())
                                         if k.lower() == b"content-type"), "")
            elif msg["type"] == "http.response.body" and error_body is not None:
                error_body += msg.get("body", b"")[:_ERROR_BODY_LIMIT - len(error_body)]
            await send(msg)

        HTTP_IN_PROGRESS.labels(method).inc()
        try:
            await self.app(scope, receive, observed)
        finally:
            HTTP_IN_PROGRESS.labels(method).dec()
            route = self._route(scope)
            HTTP_REQUESTS.labels(method, route, str(status)).inc()
            HTTP_DURATION.labels(method, route).observe(time.perf_counter() - t0)
            if status >= 400:
                HTTP_ERRORS.labels(route, error_code(status, content_type, bytes(error_body or b""))).inc()
