"""``zapverify bench``: drive a running server with real signed items and measure it.

Items are signed once with the reference libraries (:func:`app.engine.reference.kat.sign_items`):
``unique`` distinct items, repeated to fill a batch, so slow signers (SLH-DSA "s") cost
seconds, not hours.  The request body (a ZAP frame or the JSON text) is built once too,
so the numbers measure the server and the wire, not the load generator's encoding.

``concurrency`` requests are kept in flight: over HTTP by that many concurrent posts on
a pooled :class:`httpx.AsyncClient`, over the WebSocket by pipelining on one connection.
Over HTTP each request carries the deadline (``--deadline``, header ``X-Zapverify-Deadline``;
none: the server's default), and a refusal (503 ``OVERLOADED``) is counted as an error and
then honoured: that worker waits the answer's ``Retry-After`` before it sends again, as a
client should (docs/operations.md, "Load shedding").  When ``duration`` runs out no new
request is sent and the ones in flight are waited for (at most ``grace`` seconds more) and
counted: a slow scheme's last requests are part of its rate, not dropped.
The ingest transports ``tcp``, ``udp`` and ``quic`` pipeline ZAP frames on one connection
(one socket for UDP) to the server's ingest port (docs/wire-format.md section 8), which
``GET /v1/status`` names unless ``port`` is given.  Every reply is checked: each item is
valid, so a reply with another count or any false verdict is a mismatch.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from app.core.errors import ConnectionFailed, RequestError, ZapVerifyError
from app.engine.reference import kat
from app.wire import zap
from zapverify.http import AsyncClient, BatchVerdicts, VerifyResult, auth_headers, json_body

HTTP_TRANSPORTS = ("json", "zap", "ws")
INGEST_TRANSPORTS = ("tcp", "udp", "quic")
TRANSPORTS = HTTP_TRANSPORTS + INGEST_TRANSPORTS
#: The largest frame one UDP datagram carries, bytes.
UDP_MAX_FRAME = 65507


@dataclass
class BenchConfig:
    """What to run: see ``zapverify bench --help``."""

    url: str = "http://127.0.0.1:8000"
    scheme: str = "ed25519"
    batch: int = 1024
    duration: float = 10.0
    concurrency: int = 4
    transport: str = "zap"
    unique: int = 64
    #: Ingest transports: the port (None: ask GET /v1/status) and host (None: the URL's).
    port: int | None = None
    host: str | None = None
    #: An API key with the verify scope (None: none): a bearer token over HTTP, the keyed
    #: handshake over TCP and QUIC (docs/wire-format.md section 8).  Never in the report.
    api_key: str | None = field(default=None, repr=False)
    #: Seconds, sent as X-Zapverify-Deadline over HTTP (None: the server's default).
    deadline: float | None = None
    #: Seconds the requests in flight at the end of ``duration`` are waited for.
    grace: float = 120.0


@dataclass
class BenchReport:
    """Measured numbers (``--json`` writes :meth:`to_dict`).

    Attributes:
        requests / items: completed requests (frames) and the items in them.
        errors: requests answered with an error or lost; ``first_error`` says the first.
        refused: of ``errors``, those refused for load (503 with ``Retry-After``), each
            followed by a wait of its ``Retry-After``.
        in_flight_at_end: requests in flight when ``duration`` ran out, waited for and counted.
        cut: requests still in flight ``grace`` seconds after that, cancelled and not counted
            (``duration`` bounds the sending, the first request included).
        mismatches: replies whose count or verdicts were not "all valid".
        seconds: wall time from the first send to the last reply counted, seconds.
        verifies_per_s / frames_per_s: ``items`` and ``requests`` per second.
        latency_ms: request latency percentiles (p50, p90, p99), mean and max, milliseconds.
    """

    config: dict
    requests: int = 0
    items: int = 0
    errors: int = 0
    refused: int = 0
    in_flight_at_end: int = 0
    cut: int = 0
    mismatches: int = 0
    first_error: str | None = None
    seconds: float = 0.0
    verifies_per_s: float = 0.0
    frames_per_s: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return self.requests > 0 and self.errors == 0 and self.mismatches == 0


def make_items(scheme: str, batch: int, unique: int, *, seed: int = 7) -> list[kat.Item]:
    """``batch`` valid items of ``scheme``: ``min(batch, unique)`` signed ones, repeated."""
    signed = kat.sign_items(scheme, max(1, min(batch, unique)), seed=seed, msg_len=64)
    return [signed[i % len(signed)] for i in range(batch)]


class _Run:
    def __init__(self, cfg: BenchConfig, items: list[kat.Item]):
        self.cfg = cfg
        config = asdict(cfg)
        config.pop("api_key", None)  # a report is written to files and printed
        self.report = BenchReport(config=config)
        self.latencies: list[float] = []
        self.frame = bytes(zap.encode_items(cfg.scheme, [i.public_key for i in items], [i.message for i in items],
                                            [i.signature for i in items]))
        self.json = json.dumps(json_body(items)).encode()
        self.stop_at = 0.0
        self.stopped = False
        self.in_flight = 0

    def record(self, t0: float, result: BatchVerdicts | VerifyResult) -> None:
        self.in_flight -= 1
        self.latencies.append(time.perf_counter() - t0)
        self.report.requests += 1
        self.report.items += result.count
        if result.count != self.cfg.batch or result.valid != self.cfg.batch:
            self.report.mismatches += 1

    def fail(self, exc: Exception) -> None:
        self.in_flight -= 1
        self.error(exc)

    def error(self, exc: Exception) -> None:
        self.report.errors += 1
        if getattr(exc, "retry_after", None) is not None and getattr(exc, "status", None) == 503:
            self.report.refused += 1
        if self.report.first_error is None:
            self.report.first_error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, ConnectionFailed):
            self.stopped = True

    def running(self) -> bool:
        return not self.stopped and time.perf_counter() < self.stop_at

    async def http_worker(self, client: AsyncClient) -> None:
        while self.running():
            t0 = time.perf_counter()
            self.in_flight += 1
            result: BatchVerdicts | VerifyResult
            try:
                if self.cfg.transport == "zap":
                    result = await client.verify_frame(self.frame)
                else:
                    result = await client.verify_json_body(self.json)
            except ZapVerifyError as exc:
                self.fail(exc)
                await self.back_off(exc)
                continue
            self.record(t0, result)

    async def back_off(self, exc: ZapVerifyError) -> None:
        """Wait a refusal's ``Retry-After`` (never past the end of the window) before the next send."""
        wait = getattr(exc, "retry_after", None)
        if wait and self.running():
            await asyncio.sleep(min(wait, max(0.0, self.stop_at - time.perf_counter())))

    async def ws_worker(self, stream) -> None:
        """Pipelined requests on one stream: the WebSocket, or an ingest connection."""
        while self.running():
            t0 = time.perf_counter()
            self.in_flight += 1
            try:
                result = await (await stream.submit(self.frame))
            except ZapVerifyError as exc:
                self.fail(exc)
                continue
            self.record(t0, result)

    async def until_deadline(self, work: Awaitable[Any]) -> None:
        """Run ``work`` (workers that stop sending at ``stop_at``) until it ends; what is in
        flight at ``stop_at`` is waited for, up to ``grace`` seconds, and then cut."""
        job = asyncio.ensure_future(work)
        done, _ = await asyncio.wait({job}, timeout=max(0.0, self.stop_at - time.perf_counter()))
        if done:
            return job.result()
        self.report.in_flight_at_end = self.in_flight
        try:
            await asyncio.wait_for(job, timeout=self.cfg.grace)
        except TimeoutError:
            self.report.cut += self.in_flight
            self.in_flight = 0

    async def first(self, request: Awaitable[Any]) -> bool:
        """The first request (it connects, and fails early on a wrong URL or scheme), inside
        the duration: False when it got no answer in time."""
        try:
            await asyncio.wait_for(request, timeout=max(0.0, self.stop_at - time.perf_counter()))
        except TimeoutError:
            self.error(TimeoutError(f"no answer to the first request within --duration {self.cfg.duration:g} s"))
            return False
        return True

    def finish(self, seconds: float) -> BenchReport:
        r = self.report
        r.seconds = seconds
        if seconds > 0:
            r.verifies_per_s = r.items / seconds
            r.frames_per_s = r.requests / seconds
        if self.latencies:
            lat = np.array(self.latencies) * 1000
            p50, p90, p99 = np.percentile(lat, [50, 90, 99])
            r.latency_ms = {"p50": float(p50), "p90": float(p90), "p99": float(p99),
                            "mean": float(lat.mean()), "max": float(lat.max())}
        return r


async def ingest_address(cfg: BenchConfig) -> tuple[str, int]:
    """(host, port) of the server's ingest listener for ``cfg.transport``: ``cfg.host`` /
    ``cfg.port`` when given, else what ``GET /v1/status`` reports (host: the URL's when the
    server binds every address).

    Raises :class:`ConnectionFailed` when the server cannot be asked or has that transport off.
    """
    import httpx

    host = cfg.host or httpx.URL(cfg.url).host
    if cfg.port is not None:
        return host, cfg.port
    async with httpx.AsyncClient(base_url=cfg.url, timeout=30, headers=auth_headers(api_key=cfg.api_key or "")) as http:
        try:
            ingest = (await http.get("/v1/status")).json().get("ingest") or {}
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            raise ConnectionFailed(f"{cfg.url}/v1/status: {exc}") from exc
    port = ((ingest.get("transports") or {}).get(cfg.transport) or {}).get("port")
    if not port:
        raise ConnectionFailed(f"the server at {cfg.url} has no {cfg.transport} ingest port "
                               f"(set ZAPVERIFY_INGEST_{cfg.transport.upper()}_PORT there, or pass --port)")
    bind = ingest.get("bind")
    if cfg.host is None and bind not in (None, "0.0.0.0", "::", ""):
        host = bind
    return host, int(port)


async def run(cfg: BenchConfig, items: list[kat.Item] | None = None,
              on_tick: Callable[[float, BenchReport], None] | None = None) -> BenchReport:
    """Run the benchmark; ``on_tick(elapsed_seconds, report_so_far)`` is called ~5 times a second.

    Raises :class:`ConnectionFailed` when the server cannot be reached at all, and
    :class:`RequestError` when a UDP frame would not fit in one datagram.
    """
    if cfg.transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}")
    items = items if items is not None else make_items(cfg.scheme, cfg.batch, cfg.unique)
    state = _Run(cfg, items)
    if cfg.transport in INGEST_TRANSPORTS:
        return await _run_ingest(cfg, state, on_tick)
    headers = auth_headers(api_key=cfg.api_key or "")  # an empty key: none, and not the environment's
    # Retrying is the bench's own (it counts refusals, then waits their Retry-After).
    async with AsyncClient(cfg.url, timeout=max(60.0, cfg.duration, cfg.deadline or 0.0), headers=headers,
                           retry=None, deadline=cfg.deadline) as client:
        state.stop_at = time.perf_counter() + cfg.duration
        if not await state.first(client.verify_frame(state.frame)):
            return state.finish(0.0)

        async def drive() -> float:
            t0 = time.perf_counter()
            ticker = asyncio.create_task(_tick(t0, state, on_tick)) if on_tick else None
            try:
                if cfg.transport == "ws":
                    async with client.stream(max_in_flight=cfg.concurrency) as stream:
                        await state.until_deadline(asyncio.gather(*(state.ws_worker(stream)
                                                                    for _ in range(cfg.concurrency))))
                else:
                    await state.until_deadline(asyncio.gather(*(state.http_worker(client)
                                                                for _ in range(cfg.concurrency))))
            finally:
                if ticker:
                    ticker.cancel()
            return time.perf_counter() - t0

        seconds = await drive()
    report = state.finish(seconds)
    if on_tick:
        on_tick(seconds, report)
    return report


async def _run_ingest(cfg: BenchConfig, state: _Run,
                      on_tick: Callable[[float, BenchReport], None] | None) -> BenchReport:
    from zapverify.ingest import connect

    if cfg.transport == "udp" and len(state.frame) > UDP_MAX_FRAME:
        raise RequestError(f"a {cfg.batch}-item {cfg.scheme} frame is {len(state.frame)} bytes; one UDP datagram "
                           f"carries at most {UDP_MAX_FRAME}: use a smaller --batch", field="batch")
    host, port = await ingest_address(cfg)
    async with connect(cfg.transport, host, port, max_in_flight=cfg.concurrency,
                       retry_seconds=max(1.0, 2 * cfg.duration),
                       api_key=cfg.api_key if cfg.transport != "udp" else None) as stream:
        state.stop_at = time.perf_counter() + cfg.duration

        async def first() -> None:
            await (await stream.submit(state.frame))

        if not await state.first(first()):
            return state.finish(0.0)
        t0 = time.perf_counter()
        ticker = asyncio.create_task(_tick(t0, state, on_tick)) if on_tick else None
        try:
            await state.until_deadline(asyncio.gather(*(state.ws_worker(stream) for _ in range(cfg.concurrency))))
        finally:
            if ticker:
                ticker.cancel()
        seconds = time.perf_counter() - t0
    report = state.finish(seconds)
    if on_tick:
        on_tick(seconds, report)
    return report


async def _tick(t0: float, state: _Run, on_tick: Callable[[float, BenchReport], None]) -> None:
    while True:
        on_tick(time.perf_counter() - t0, state.report)
        await asyncio.sleep(0.2)


def format_report(r: BenchReport) -> str:
    """A few human-readable lines."""
    c = r.config
    lat = r.latency_ms
    lines = [
        f"transport={c['transport']} scheme={c['scheme']} batch={c['batch']} concurrency={c['concurrency']} "
        f"url={c['url']}",
        f"{r.verifies_per_s:,.0f} verifies/s   {r.frames_per_s:,.2f} frames/s   "
        f"({r.items:,} items in {r.requests:,} requests over {r.seconds:.2f} s)",
    ]
    if lat:
        lines.append(f"latency ms: p50 {lat['p50']:.1f}  p90 {lat['p90']:.1f}  p99 {lat['p99']:.1f}  "
                     f"mean {lat['mean']:.1f}  max {lat['max']:.1f}")
    lines.append(f"errors {r.errors} (refused for load {r.refused})  in flight at the end {r.in_flight_at_end}"
                 f" (cut {r.cut})  mismatches {r.mismatches}"
                 + (f"  first error: {r.first_error}" if r.first_error else ""))
    if r.refused:
        lines.append(advice(r))
    return "\n".join(lines)


def advice(r: BenchReport) -> str:
    """What to change when the server refused requests for load (503 OVERLOADED)."""
    c = r.config
    deadline = f"--deadline {c['deadline']:g}" if c.get("deadline") else "the server's default deadline"
    return (f"{r.refused} requests were refused 503 OVERLOADED: they could not finish within {deadline} behind the "
            f"work queued. Give them a longer --deadline (up to the server's maximum), lower --concurrency "
            f"({c['concurrency']}) or --batch ({c['batch']}), or add capacity; a client should wait the "
            f"answer's Retry-After before resending (this bench does).")
