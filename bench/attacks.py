"""Attacks on a live server, one at a time (issue 37, "Done when"): can one client deny
service to the others, does memory stay bounded, does a key reach the log, is a store fault
visible, does overload keep the throughput and the deadlines?

Every section starts its own fresh ``zapverify serve`` (``python -m app.cli serve``, the
command users run: uvicorn with the bounded h11 protocol of app/api/http_limits.py) on a
free loopback port, CPU backend, a data directory of its own, receipts on (SQLite unless
said), TCP ingest on unless API keys are configured.  Only 127.0.0.1 is ever connected to;
every loop is bounded in count and time.

While a single-client attack runs, **bystanders** send small valid verify requests (4
Ed25519 items) every ``0.2`` s on each of: ``POST /v1/verify`` (JSON), ``POST
/v1/verify/zap`` (ZAP), a fresh WebSocket on ``/v1/ws/verify`` (JSON text and ZAP binary
messages in turn) and a fresh TCP ingest connection (one ZAP frame), and count what each
got.  They also run alone for a moment before the attack (the baseline: it shows the bench
itself works).  The server's resident memory is the sum of ``VmRSS`` over its process and
its children (the CPU workers), sampled every 0.1 s.

Sections (``--only`` takes these names):

1. ``slow-body``: one connection POSTs ``/v1/verify/zap`` declaring ``Content-Length`` 256 MiB
   (a ZAP header and fixed part declaring a 256 MiB frame of 2^20 items) and trickles
   96 KiB/s, above the 64 KiB/s minimum rate.
2. ``ingest-header``: a TCP ingest connection, then (fresh server) a QUIC stream, sends a
   16-byte ZAP header declaring a 256 MiB frame and nothing more.  Run with no API keys.
3. ``ws-big-json``: six WebSockets each send one 120 MiB JSON text message (built once), all
   at once, round after round for the attack's time.
4. ``header-flood``: 16 connections each send 32 MiB of an unfinished header, 400 more
   trickle one header line a second; ``/healthz`` is timed every 0.1 s; then one 8 MiB head,
   one of 100,000 header fields and one of 150 small fields are sent.
5. ``keys-in-logs``: API keys configured; the key is used through ``?access_token=``,
   ``Authorization: Bearer``, ``X-API-Key`` and the ``zapverify.key.<base64url>``
   WebSocket subprotocol (and a wrong key), with the server at log level ``debug`` and
   (fresh server) ``info``; then the server's whole stdout and stderr are searched.
6. ``ws-rate-limit``: a key limited to 5 requests/s (burst 20) sends 200 messages on one
   WebSocket.
7. ``ws-deep-json``: JSON nested 100,000 deep on the WebSocket, with and without a readable
   ``request_id``, each on a fresh connection, round after round for the attack's time; the
   same body over HTTP for comparison.
8. ``store-full``: receipts in SQLite on a small tmpfs (mounted here; skipped if mounting is
   refused); the disk is filled, then freed.  ``store-stopped``: receipts in a throwaway
   PostgreSQL (``scripts/pg_test_cluster``), which is stopped, then started again (skipped
   when PostgreSQL is not installed, unless ``--require-postgres``).
9. ``overload``: the unloaded rate of 4096-item Ed25519 JSON batches is measured closed-loop
   (1 and 2 clients, the larger taken), then 48 clients send them closed-loop at once, each
   waiting a 503's ``Retry-After``; the requests in flight at the end are waited for.

Thresholds (a section passes when every check does; the script exits 1 if any fails):

- single-client attacks (1-4, 7): each bystander transport >= 95 % answered OK, during
  the attack and in the baseline;
- 1-4 and 9: peak RSS of the server's process tree under ``--rss-bound`` (768 MiB: the
  idle tree, about 200 MiB, plus twice the admission byte bound of 256 MiB); 3: each
  message over the JSON body limit refused; 4: every flooding connection answered 431 or
  closed before its 32 MiB, every trickling one cut within the header timeout + 3 s,
  ``/healthz`` p99 <= 0.5 s, the single oversized heads refused (431 or closed);
- 5: every request with the key answered, the wrong key refused, request lines present in
  the log, and no form of either key (text, base64url, their first 16 characters) anywhere
  in it;
- 6: answered OK at most burst + rate x elapsed, the rest ``RATE_LIMITED``, 200 replies;
- 7: every message answered or the connection closed with a code within 5 s; an error
  reply naming the request where its id was readable;
- 8: ``/readyz`` 503 within 5 s of the fault (naming ``disk_full`` for the full disk) and 200
  within 5 s of the recovery; verify requests meanwhile answered 503 ``STORE_UNAVAILABLE``
  with ``Retry-After`` within 2 s (a full disk may still take a write: 200 is allowed there);
  verify requests answered 200 after;
- 9: the unloaded requests all 200; under load every answer 200, or 503 with
  ``Retry-After`` (no other status, no transport error); every admitted request answered
  within its deadline (``ZAPVERIFY_ADMISSION_DEFAULT_DEADLINE_SECONDS``, 30 s; the server
  counts no deadline miss); the served throughput at least 0.8x the unloaded one.

``--quick``: shorter durations and fewer connections (the header timeout is lowered to
2 s, the WebSocket messages are 2 x 70 MiB), for the test.  Writes
``bench/results/attacks.json`` and ``.md`` (``--out`` changes the folder; ``--keep-logs DIR``
keeps the servers' logs, deleted otherwise).  About 5 minutes on 2 cores.

    python bench/attacks.py [--quick] [--only NAME[,NAME]] [--out DIR] [--require-postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import errno
import hashlib
import json
import os
import platform
import re
import secrets
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402

LOOPBACK = "127.0.0.1"
MiB = 1 << 20
#: Share of bystander requests that must be answered OK, per transport.
MIN_ANSWERED = 0.95
#: Seconds within which /readyz must flip after a store fault and after the recovery.
READYZ_FLIP_S = 5.0
#: Seconds within which a verify request must be refused while the store is down.
FAIL_FAST_S = 2.0
#: /healthz p99 bound during the header flood, seconds.
HEALTHZ_P99_S = 0.5
#: Seconds a deeply nested message may go unanswered.
REPLY_WITHIN_S = 5.0
JSON_CT = {"content-type": "application/json"}
ZAP_CT = {"content-type": "application/x-zap"}


@dataclass(frozen=True)
class Plan:
    """Durations and sizes of one run (full, or ``--quick``)."""

    attack: float  # seconds of a timed single-client attack
    ingest_attack: float  # seconds of the ingest attack: past the read deadline in a full run
    baseline: float  # seconds of bystanders alone before it
    interval: float  # seconds between one transport's bystander requests
    flood_conns: int
    flood_bytes: int
    trickle_conns: int
    trickle_seconds: float
    header_timeout: float | None  # None: the server's default (10 s)
    ws_conns: int
    ws_bytes: int
    rate_messages: int
    unloaded: int  # sequential requests of the unloaded latency
    sustain: float  # seconds of the closed-loop rate
    overload: float  # seconds the overload section's clients send
    hold: float  # seconds a store fault is held after /readyz flipped
    after: int  # verify requests after a store recovered


FULL = Plan(attack=20.0, ingest_attack=36.0, baseline=3.0, interval=0.2, flood_conns=16, flood_bytes=32 * MiB,
            trickle_conns=400, trickle_seconds=15.0, header_timeout=None, ws_conns=6, ws_bytes=120 * MiB,
            rate_messages=200, unloaded=30, sustain=8.0, overload=20.0, hold=3.0, after=50)
QUICK = Plan(attack=4.0, ingest_attack=4.0, baseline=1.5, interval=0.2, flood_conns=4, flood_bytes=32 * MiB,
             trickle_conns=50, trickle_seconds=5.0, header_timeout=2.0, ws_conns=2, ws_bytes=70 * MiB,
             rate_messages=200, unloaded=10, sustain=3.0, overload=6.0, hold=1.5, after=10)


# ------------------------------------------------------------------ small helpers
def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def ms(seconds: float | None) -> str:
    return "–" if seconds is None or seconds != seconds else f"{1e3 * seconds:.0f} ms"


def status_of(data: bytes) -> int | None:
    m = re.match(rb"HTTP/1\.[01] (\d{3})", data or b"")
    return int(m.group(1)) if m else None


def items(n: int, seed: int) -> list:
    from app.engine.reference import kat

    return kat.sign_items("ed25519", n, seed=seed, msg_len=32)


def json_items(its: list) -> list[dict]:
    return [{"scheme": "ed25519", "public_key": i.public_key.hex(), "message": i.message.hex(),
             "signature": i.signature.hex()} for i in its]


def zap_frame(its: list, request_id: int = 0) -> bytes:
    from app.wire import zap

    return bytes(zap.encode_items("ed25519", [i.public_key for i in its], [i.message for i in its],
                                  [i.signature for i in its], request_id=request_id))


def zap_head(size: int, request_id: int = 1) -> bytes:
    """A ZAP v1 verify-request header declaring a frame of ``size`` bytes."""
    from app.wire import zap

    return struct.pack("<4sHBBII", zap.MAGIC, zap.VERSION, zap.TYPE_REQUEST, 0, request_id, size)


def zap_error_name(data: bytes) -> str:
    from app.wire import zap

    try:
        frame = zap.decode(data, zap.CLIENT_LIMITS)
    except Exception as exc:  # not a frame at all
        return f"unreadable frame ({type(exc).__name__})"
    return frame.name if isinstance(frame, zap.ErrorFrame) else "ok"


def http_label(r: httpx.Response) -> str:
    """``ok`` for 200, else ``<status> <error code>``."""
    if r.status_code == 200:
        return "ok"
    code = ""
    if r.headers.get("content-type", "").startswith("application/x-zap"):
        code = zap_error_name(r.content)
    else:
        with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
            code = r.json()["error"]["code"]
    return f"{r.status_code} {code}".strip()


def error_code(r: httpx.Response) -> str | None:
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return r.json()["error"]["code"]
    return None


def ws_connect(url: str, **kw: Any):
    from websockets.asyncio.client import connect

    opts = {"open_timeout": 5, "close_timeout": 2, "max_size": 4 * MiB, "compression": None, "proxy": None,
            "ping_interval": None}
    return connect(url, **{**opts, **kw})


def ws_close_code(exc: BaseException) -> int | None:
    rcvd = getattr(exc, "rcvd", None)
    return rcvd.code if rcvd is not None else None


# ------------------------------------------------------------------ memory
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d))
    return kids


def tree(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree_rss_mib(pid: int, pids: list[int] | None = None) -> float:
    return sum(rss_mib(p) for p in (pids or tree(pid)))


class RssSampler(threading.Thread):
    """Peak RSS of a process tree, sampled every ``every`` s (the tree re-read each second)."""

    def __init__(self, pid: int, every: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak, self.stop = pid, every, 0.0, threading.Event()

    def run(self) -> None:
        pids, listed = tree(self.pid), time.monotonic()
        while not self.stop.is_set():
            if time.monotonic() - listed > 1.0:
                pids, listed = tree(self.pid), time.monotonic()
            self.peak = max(self.peak, tree_rss_mib(self.pid, pids))
            time.sleep(self.every)

    def __enter__(self) -> RssSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(5)


# ------------------------------------------------------------------ the server
class Server:
    """``python -m app.cli serve`` on free loopback ports, in its own session (so that
    :meth:`stop` ends its CPU workers too), its stdout and stderr in ``<work>/<name>.log``."""

    def __init__(self, work: Path, name: str, env: dict[str, str] | None = None, *, log_level: str = "warning",
                 tcp: bool = True, quic: bool = False, cpu_workers: int = 2):
        self.port = free_port()
        self.tcp_port = free_port() if tcp else 0
        self.quic_port = free_port(socket.SOCK_DGRAM) if quic else 0
        self.url, self.ws_url = f"http://{LOOPBACK}:{self.port}", f"ws://{LOOPBACK}:{self.port}"
        self.log_path = work / f"{name}.log"
        self.log_level = log_level
        data = work / f"{name}-data"
        data.mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("ZAPVERIFY_", "ZAP_", "PROMETHEUS_MULTIPROC")) and k.lower() not in
                ("http_proxy", "https_proxy", "all_proxy")}
        self.env = {**base, "ZAPVERIFY_BACKEND": "cpu", "ZAPVERIFY_CPU_WORKERS": str(cpu_workers),
                    "ZAPVERIFY_DATA_DIR": str(data), "ZAPVERIFY_LOG_LEVEL": log_level,
                    "ZAPVERIFY_INGEST_TCP_PORT": str(self.tcp_port), "ZAPVERIFY_INGEST_QUIC_PORT": str(self.quic_port),
                    "NO_PROXY": "*", **(env or {})}
        self.proc: subprocess.Popen | None = None
        self._log: Any = None
        self.idle_rss = 0.0

    def start(self, timeout: float = 120.0) -> Server:
        log = self._log = open(self.log_path, "ab")  # the child writes it; closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--host", LOOPBACK, "--port", str(self.port), "--workers", "1",
             "--log-level", self.log_level], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server was not ready within {timeout:g} s: {self.log_tail()}")
            time.sleep(0.1)
        self.idle_rss = tree_rss_mib(self.proc.pid)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # a CPU worker left behind
        if self._log is not None:
            self._log.close()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 15) -> str:
        return " | ".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------ bystanders
class Bystanders:
    """Small valid verify requests on every transport, each every ``interval`` s, counted."""

    def __init__(self, srv: Server, interval: float, timeout: float = 5.0):
        self.srv, self.interval, self.timeout = srv, interval, timeout
        its = items(4, seed=37)
        self.json_items = json_items(its)
        self.json_body = json.dumps({"encoding": "hex", "items": self.json_items}).encode()
        self.its = its
        self.transports = ["json", "zap", "ws"] + (["tcp"] if srv.tcp_port else [])
        self.outcomes: dict[str, Counter[str]] = {t: Counter() for t in self.transports}
        self.latency: dict[str, list[float]] = {t: [] for t in self.transports}

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=self.srv.url, timeout=self.timeout, trust_env=False) as http:
            await asyncio.gather(*(self._loop(t, http, stop) for t in self.transports))

    async def for_seconds(self, seconds: float) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(self.run(stop))
        await asyncio.sleep(seconds)
        stop.set()
        await task

    async def _loop(self, transport: str, http: httpx.AsyncClient, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(self.timeout + 1):
                    label = await self._one(transport, http, n)
            except TimeoutError:
                label = "timeout"
            except Exception as exc:  # a refusal by connection: counted, never fatal
                label = f"error {type(exc).__name__}"
            dt = time.monotonic() - t0
            self.outcomes[transport][label] += 1
            if label == "ok":
                self.latency[transport].append(dt)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, self.interval - dt))

    async def _one(self, transport: str, http: httpx.AsyncClient, n: int) -> str:
        if transport == "json":
            return http_label(await http.post("/v1/verify", content=self.json_body, headers=JSON_CT))
        if transport == "zap":
            return http_label(await http.post("/v1/verify/zap", content=zap_frame(self.its, n), headers=ZAP_CT))
        if transport == "ws":
            return await self._ws(n)
        return await self._tcp(n)

    async def _ws(self, n: int) -> str:
        from websockets.exceptions import ConnectionClosed, InvalidStatus

        try:
            async with ws_connect(self.srv.ws_url + "/v1/ws/verify", open_timeout=self.timeout) as ws:
                if n % 2:
                    await ws.send(json.dumps({"request_id": n, "encoding": "hex", "items": self.json_items}))
                else:
                    await ws.send(zap_frame(self.its, n))
                reply = await ws.recv()
        except InvalidStatus as exc:
            return f"ws {exc.response.status_code}"
        except ConnectionClosed as exc:
            return f"ws close {ws_close_code(exc)}"
        if isinstance(reply, bytes):
            name = zap_error_name(reply)
            return name if name == "ok" else f"ws {name}"
        body = json.loads(reply)
        return f"ws {body['error']['code']}" if "error" in body else "ok"

    async def _tcp(self, n: int) -> str:
        reader, writer = await asyncio.open_connection(LOOPBACK, self.srv.tcp_port)
        try:
            writer.write(zap_frame(self.its, n))
            await writer.drain()
            head = await reader.readexactly(16)
            size = struct.unpack_from("<I", head, 12)[0]
            rest = await reader.readexactly(max(0, size - 16))
        except asyncio.IncompleteReadError:
            return "tcp closed"
        finally:
            writer.transport.abort()
        name = zap_error_name(head + rest)
        return name if name == "ok" else f"tcp {name}"

    def summary(self) -> dict:
        out = {}
        for t in self.transports:
            c = self.outcomes[t]
            total, ok = sum(c.values()), c.get("ok", 0)
            lat = self.latency[t]
            out[t] = {"requests": total, "ok": ok, "ok_share": ok / total if total else 0.0,
                      "outcomes": dict(c), "ok_p50_ms": 1e3 * statistics.median(lat) if lat else None,
                      "ok_p99_ms": 1e3 * pct(lat, 0.99) if lat else None}
        return out


def bystanders_ok(summary: dict) -> bool:
    return bool(summary) and all(s["requests"] >= 3 and s["ok_share"] >= MIN_ANSWERED for s in summary.values())


def bystander_line(summary: dict) -> str:
    """``json 100/100 (p99 12 ms); ...``: answered OK of sent per transport, the p99 latency of
    the OK ones, and what the others got."""
    parts = []
    for t, s in summary.items():
        bad = {k: v for k, v in s["outcomes"].items() if k != "ok"}
        p99 = f"p99 {s['ok_p99_ms']:.0f} ms" if s["ok_p99_ms"] is not None else "no OK answer"
        parts.append(f"{t} {s['ok']}/{s['requests']} ({p99}" + (f"; {', '.join(f'{v}× {k}' for k, v in bad.items())}"
                                                                 if bad else "") + ")")
    return "; ".join(parts)


async def under_attack(srv: Server, plan: Plan, attack: Callable[[], Awaitable[Any]]) -> tuple[Any, dict, dict, float]:
    """Bystanders alone for ``plan.baseline`` s, then bystanders and ``attack()`` together
    (RSS sampled meanwhile): (attack result, baseline summary, summary under attack, peak RSS)."""
    base = Bystanders(srv, plan.interval)
    await base.for_seconds(plan.baseline)
    by = Bystanders(srv, plan.interval)
    stop = asyncio.Event()
    with RssSampler(srv.pid) as sampler:
        task = asyncio.create_task(by.run(stop))
        try:
            result = await attack()
        finally:
            stop.set()
            await task
    return result, base.summary(), by.summary(), sampler.peak


def single_client_checks(base: dict, during: dict) -> dict[str, bool]:
    return {"bystanders answered OK before the attack (>= 95 % each transport)": bystanders_ok(base),
            "bystanders answered OK during the attack (>= 95 % each transport)": bystanders_ok(during)}


# ------------------------------------------------------------------ sections
@dataclass
class Ctx:
    plan: Plan
    work: Path
    rss_bound: float
    cpu_workers: int
    require_postgres: bool
    quick: bool

    def server(self, name: str, env: dict[str, str] | None = None, **kw: Any) -> Server:
        return Server(self.work, name, env, cpu_workers=self.cpu_workers, **kw)


def _result(name: str, title: str, measures: str, *, checks: dict[str, bool], lines: list[str], data: dict,
            skipped: str | None = None) -> dict:
    return {"name": name, "title": title, "measures": measures, "checks": checks,
            "pass": None if skipped else all(checks.values()), "skipped": skipped, "lines": lines, "data": data}


def _rss_check(ctx: Ctx, peak: float) -> tuple[str, bool]:
    return f"peak RSS of the server's process tree < {ctx.rss_bound:g} MiB", peak < ctx.rss_bound


# 1 ---------------------------------------------------------------- slow body
SLOW_RATE = 96 * 1024
DECLARED = 256 * MiB


def slow_frame_head(size: int = DECLARED, count: int = 1 << 20) -> bytes:
    """Header and fixed part of a ZAP request of ``count`` Ed25519 items in ``size`` bytes."""
    from app.core.schemes import SCHEMES

    return zap_head(size) + struct.pack("<BBBBIII", SCHEMES["ed25519"].code, 0, 0, 0, count, 32, 64)


async def slow_body(port: int, seconds: float, rate: float = SLOW_RATE, declared: int = DECLARED) -> dict:
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    head = (f"POST /v1/verify/zap HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\nContent-Type: application/x-zap\r\n"
            f"Content-Length: {declared}\r\n\r\n").encode()
    frame = slow_frame_head(declared)
    writer.write(head + frame)
    sent, tick = len(frame), 0.1
    chunk = bytes(int(rate * tick))
    answer = asyncio.create_task(reader.read(4096))
    t0 = time.monotonic()
    ended, why = None, "held for the whole attack"
    try:
        k = 0
        while time.monotonic() - t0 < seconds:
            if answer.done():
                ended, why = time.monotonic() - t0, "answered by the server"
                break
            try:
                writer.write(chunk)
                await asyncio.wait_for(writer.drain(), 2.0)
            except (ConnectionError, TimeoutError) as exc:
                ended, why = time.monotonic() - t0, f"send failed ({type(exc).__name__})"
                break
            sent += len(chunk)
            k += 1
            await asyncio.sleep(max(0.0, t0 + k * tick - time.monotonic()))
        elapsed = time.monotonic() - t0
        data = b""
        with contextlib.suppress(TimeoutError, ConnectionError):
            data = await asyncio.wait_for(answer, 0.5)
    finally:
        answer.cancel()
        writer.transport.abort()
    return {"declared_bytes": declared, "sent_bytes": sent, "seconds": round(elapsed, 2),
            "rate_kib_s": round(sent / elapsed / 1024, 1), "ended_after_s": None if ended is None else round(ended, 2),
            "how_it_ended": why, "answer_status": status_of(data)}


def section_slow_body(ctx: Ctx) -> dict:
    p = ctx.plan
    with ctx.server("slow-body") as srv:
        res, base, during, peak = asyncio.run(under_attack(srv, p, lambda: slow_body(srv.port, p.attack)))
        idle = srv.idle_rss
    checks = single_client_checks(base, during)
    checks.__setitem__(*_rss_check(ctx, peak))
    lines = [f"Attacker: declared {DECLARED // MiB} MiB, sent {res['sent_bytes'] / MiB:.2f} MiB in "
             f"{res['seconds']:g} s ({res['rate_kib_s']:g} KiB/s); {res['how_it_ended']}"
             + (f" after {res['ended_after_s']:g} s, status {res['answer_status']}" if res["ended_after_s"] else "")
             + ".",
             f"Bystanders before: {bystander_line(base)}.", f"Bystanders during: {bystander_line(during)}.",
             f"Server RSS: idle {idle:.0f} MiB, peak {peak:.0f} MiB."]
    return _result("slow-body", "Slow body: 256 MiB declared, 96 KiB/s sent",
                   "One HTTP connection declares a 256 MiB ZAP body and trickles 96 KiB/s (above the 64 KiB/s "
                   f"minimum rate) for {p.attack:g} s while the bystanders send.",
                   checks=checks, lines=lines, data={"attacker": res, "baseline": base, "during": during,
                                                     "rss_mib": {"idle": idle, "peak": peak}})


# 2 ---------------------------------------------------------------- ingest header only
async def tcp_header_only(port: int, seconds: float) -> dict:
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    writer.write(zap_head(DECLARED))
    await writer.drain()
    t0 = time.monotonic()
    data, ended = b"", None
    try:
        data = await asyncio.wait_for(reader.read(65536), seconds)
        ended = time.monotonic() - t0
    except TimeoutError:
        pass
    except ConnectionError:
        ended = time.monotonic() - t0
    finally:
        writer.transport.abort()
    return {"transport": "tcp", "ended_after_s": None if ended is None else round(ended, 2),
            "how_it_ended": "held for the whole attack" if ended is None else
            ("closed by the server" if not data else f"answered {zap_error_name(data)}")}


async def quic_header_only(port: int, seconds: float) -> dict:
    from aioquic.asyncio.client import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.quic import events
    from aioquic.quic.configuration import QuicConfiguration

    class Probe(QuicConnectionProtocol):
        def __init__(self, *a: Any, **kw: Any):
            super().__init__(*a, **kw)
            self.seen: list[str] = []
            self.data = bytearray()
            self.changed = asyncio.Event()

        def quic_event_received(self, event: Any) -> None:
            if isinstance(event, events.StreamReset):
                self.seen.append(f"stream reset, code 0x{event.error_code:04x}")
            elif isinstance(event, events.StreamDataReceived):
                self.data += event.data
                if not event.end_stream:
                    return
                self.seen.append(f"answered {zap_error_name(bytes(self.data))}")
            elif isinstance(event, events.ConnectionTerminated):
                self.seen.append(f"connection closed ({event.reason_phrase or event.error_code})")
            else:
                return
            self.changed.set()

    config = QuicConfiguration(is_client=True, alpn_protocols=["zap/1"])
    config.verify_mode = ssl.CERT_NONE
    ended = None
    async with asyncio.timeout(seconds + 20):
        async with connect(LOOPBACK, port, configuration=config, create_protocol=Probe) as proto:
            sid = proto._quic.get_next_available_stream_id()
            proto._quic.send_stream_data(sid, zap_head(DECLARED), end_stream=False)
            proto.transmit()
            t0 = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proto.changed.wait(), seconds)
                ended = time.monotonic() - t0
            seen = list(proto.seen)
    return {"transport": "quic", "ended_after_s": None if ended is None else round(ended, 2),
            "how_it_ended": "held for the whole attack" if ended is None else "; ".join(seen)}


#: ``body_read_timeout_seconds``' default: a half-received ingest frame that sends nothing is cut after it.
INGEST_READ_DEADLINE_S = 30.0


def section_ingest_header(ctx: Ctx) -> dict:
    p = ctx.plan
    seconds = p.ingest_attack
    runs, checks, lines = [], {}, []
    for transport in ("tcp", "quic"):
        with ctx.server(f"ingest-{transport}", quic=transport == "quic") as srv:
            attack = (lambda s=srv: tcp_header_only(s.tcp_port, seconds)) if transport == "tcp" else \
                (lambda s=srv: quic_header_only(s.quic_port, seconds))
            res, base, during, peak = asyncio.run(under_attack(srv, p, attack))
            idle = srv.idle_rss
        runs.append({"attacker": res, "baseline": base, "during": during, "rss_mib": {"idle": idle, "peak": peak}})
        for k, v in single_client_checks(base, during).items():
            checks[f"{transport.upper()}: {k}"] = v
        label, ok = _rss_check(ctx, peak)
        checks[f"{transport.upper()}: {label}"] = ok
        if seconds >= INGEST_READ_DEADLINE_S + 5:
            checks[f"{transport.upper()}: the half-received frame cut within the read deadline "
                   f"({INGEST_READ_DEADLINE_S:g} s) + 5 s"] = \
                res["ended_after_s"] is not None and res["ended_after_s"] <= INGEST_READ_DEADLINE_S + 5
        lines += [f"{transport.upper()} attacker: a 16-byte header declaring {DECLARED // MiB} MiB; "
                  f"{res['how_it_ended']}" + (f" after {res['ended_after_s']:g} s" if res["ended_after_s"] else "")
                  + ".",
                  f"{transport.upper()} bystanders before: {bystander_line(base)}.",
                  f"{transport.upper()} bystanders during: {bystander_line(during)}.",
                  f"{transport.upper()} server RSS: idle {idle:.0f} MiB, peak {peak:.0f} MiB."]
    return _result("ingest-header", "Ingest: a frame header and nothing more (TCP, QUIC)",
                   "A TCP ingest connection, then on a fresh server a QUIC stream, sends the 16-byte ZAP header of "
                   f"a 256 MiB frame and nothing more, held up to {seconds:g} s, while the bystanders send (no "
                   "API keys configured).", checks=checks, lines=lines, data={"runs": runs})


# 3 ---------------------------------------------------------------- WebSocket big JSON
def big_json_message(target: int) -> bytes:
    """One JSON verify request of about ``target`` bytes, ``request_id`` its first key."""
    item = json.dumps(json_items(items(1, seed=3))[0], separators=(",", ":")).encode()
    n = max(1, target // (len(item) + 1))
    return b'{"request_id":1,"encoding":"hex","items":[' + b",".join([item] * n) + b"]}"


async def ws_big(url: str, message: bytes, conns: int, seconds: float, timeout: float) -> list[list[dict]]:
    """Rounds of ``conns`` WebSockets each sending ``message`` at once, a round after the other
    until ``seconds`` have passed (one round at least, 50 at most); each round's outcomes."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    async def one(i: int) -> dict:
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                async with ws_connect(url, max_size=4 * MiB, write_limit=4 * MiB) as ws:
                    await ws.send(message, text=True)
                    reply = await ws.recv()
            body = json.loads(reply) if isinstance(reply, str) else {}
            outcome = f"reply {body['error']['code']}" if "error" in body else "reply: verified"
        except ConnectionClosed as exc:
            outcome = f"closed {ws_close_code(exc)}"
        except InvalidStatus as exc:
            outcome = f"refused {exc.response.status_code}"
        except TimeoutError:
            outcome = "no answer"
        return {"connection": i, "outcome": outcome, "seconds": round(time.monotonic() - t0, 2)}

    rounds: list[list[dict]] = []
    t0 = time.monotonic()
    while not rounds or (time.monotonic() - t0 < seconds and len(rounds) < 50):
        rounds.append(list(await asyncio.gather(*(one(i) for i in range(conns)))))
    return rounds


def section_ws_big_json(ctx: Ctx) -> dict:
    p = ctx.plan
    message = big_json_message(p.ws_bytes)
    with ctx.server("ws-big-json") as srv:
        limit = 64 * MiB  # settings.max_body_bytes' default
        rounds, base, during, peak = asyncio.run(under_attack(
            srv, p, lambda: ws_big(srv.ws_url + "/v1/ws/verify", message, p.ws_conns, p.attack, 30 + 15 * p.ws_conns)))
        idle = srv.idle_rss
    res = [r for rnd in rounds for r in rnd]
    refused = [r["outcome"] in ("reply LIMIT_EXCEEDED", "closed 1009") for r in res]
    checks = single_client_checks(base, during)
    checks.__setitem__(*_rss_check(ctx, peak))
    checks[f"each message over the {limit // MiB} MiB JSON body limit refused (LIMIT_EXCEEDED or close 1009)"] = \
        all(refused)
    outcomes = Counter(r["outcome"] for r in res)
    lines = [f"Attacker: {len(rounds)} rounds of {p.ws_conns} WebSockets, each sending one "
             f"{len(message) / MiB:.0f} MiB JSON text message at once, for {p.attack:g} s: outcomes {dict(outcomes)}; "
             "a message answered in "
             f"{max(r['seconds'] for r in res):g} s at most.",
             f"Bystanders before: {bystander_line(base)}.", f"Bystanders during: {bystander_line(during)}.",
             f"Server RSS: idle {idle:.0f} MiB, peak {peak:.0f} MiB."]
    return _result("ws-big-json", "WebSocket: big JSON text messages",
                   f"{p.ws_conns} WebSockets each send one JSON text message of {p.ws_bytes // MiB} MiB (the same "
                   "bytes, built once), all at once, again and again for "
                   f"{p.attack:g} s, while the bystanders send.", checks=checks, lines=lines,
                   data={"rounds": rounds, "message_bytes": len(message), "baseline": base, "during": during,
                         "rss_mib": {"idle": idle, "peak": peak}})


# 4 ---------------------------------------------------------------- header flood
async def _answer(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read(4096)
    except ConnectionError:
        return b""


async def flood_conn(port: int, total: int, deadline: float) -> dict:
    """One connection sending ``total`` bytes of one unfinished header line, 64 KiB at a time."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    writer.write(f"GET /healthz HTTP/1.1\r\nHost: {LOOPBACK}\r\nX-Flood: ".encode())
    chunk = b"a" * 65536
    answer = asyncio.create_task(_answer(reader))
    sent, how = 0, None
    try:
        while sent < total and time.monotonic() < deadline and not answer.done():
            writer.write(chunk)
            try:
                await asyncio.wait_for(writer.drain(), max(0.05, deadline - time.monotonic()))
            except ConnectionError:
                how = "send failed"
                break
            except TimeoutError:
                how = "server stopped reading, connection open"
                break
            sent += len(chunk)
        try:
            data: bytes | None = await asyncio.wait_for(answer, 3.0)
        except TimeoutError:
            data = None
    finally:
        answer.cancel()
        writer.transport.abort()
    status = status_of(data or b"")
    if status:
        outcome = f"answered {status}"
    elif data is not None or how == "send failed":
        outcome = "closed by the server"
    else:
        outcome = how or "all bytes taken, no answer"
    return {"sent_bytes": sent, "outcome": outcome,
            "cut": sent < total and (status is not None or outcome == "closed by the server")}


async def trickle_conn(port: int, deadline: float, every: float = 1.0) -> dict:
    """One connection sending a request line, then one header line every ``every`` s, never
    the blank line that ends the head, until ``deadline`` or until the server answers or closes."""
    try:
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
    except OSError as exc:
        return {"connected": False, "error": type(exc).__name__}
    t0 = time.monotonic()
    writer.write(f"GET /healthz HTTP/1.1\r\nHost: {LOOPBACK}\r\n".encode())
    answer = asyncio.create_task(_answer(reader))
    lines, closed_after = 0, None
    try:
        while time.monotonic() < deadline:
            done, _ = await asyncio.wait({answer}, timeout=min(every, max(0.0, deadline - time.monotonic())))
            if done:
                break
            try:
                writer.write(f"X-Trickle-{lines}: {lines}\r\n".encode())
                await asyncio.wait_for(writer.drain(), 1.0)
                lines += 1
            except ConnectionError:
                break
            except TimeoutError:
                continue
        done, _ = await asyncio.wait({answer}, timeout=0.2)
        data = answer.result() if done else None
        if done:
            closed_after = time.monotonic() - t0
    finally:
        answer.cancel()
        writer.transport.abort()
    return {"connected": True, "lines": lines,
            "closed_after_s": None if closed_after is None else round(closed_after, 2),
            "status": status_of(data or b"")}


async def single_head(port: int, head: bytes) -> str:
    """Send one whole request head; what came back: ``431``..., ``closed`` or ``no answer``."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    try:
        answer = asyncio.create_task(_answer(reader))
        try:
            writer.write(head)
            await asyncio.wait_for(writer.drain(), 10)
        except (ConnectionError, TimeoutError):
            pass
        try:
            data = await asyncio.wait_for(answer, 10)
        except TimeoutError:
            return "no answer"
        return str(status_of(data)) if status_of(data) else "closed"
    finally:
        writer.transport.abort()


async def healthz_probe(url: str, stop: asyncio.Event, every: float = 0.1) -> list[float]:
    out = []
    async with httpx.AsyncClient(timeout=5, trust_env=False) as c:
        while not stop.is_set():
            t = time.monotonic()
            try:
                r = await c.get(url + "/healthz")
                out.append(time.monotonic() - t if r.status_code == 200 else 5.0)
            except httpx.HTTPError:
                out.append(5.0)  # no answer counts as the client's timeout
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, every - (time.monotonic() - t)))
    return out


async def header_flood(srv: Server, plan: Plan) -> dict:
    deadline = time.monotonic() + plan.trickle_seconds
    stop = asyncio.Event()
    probe = asyncio.create_task(healthz_probe(srv.url, stop))
    floods = [flood_conn(srv.port, plan.flood_bytes, deadline) for _ in range(plan.flood_conns)]
    trickles = [trickle_conn(srv.port, deadline) for _ in range(plan.trickle_conns)]
    results = await asyncio.gather(*floods, *trickles)
    stop.set()
    healthz = await probe
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (8 * MiB) + b"\r\n\r\n"
    many = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(100_000)) + b"\r\n"
    some = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n"
    singles = {"one 8 MiB header": await single_head(srv.port, big),
               "100,000 header fields": await single_head(srv.port, many),
               "150 small header fields": await single_head(srv.port, some)}
    return {"floods": results[:plan.flood_conns], "trickles": results[plan.flood_conns:], "healthz": healthz,
            "singles": singles}


def section_header_flood(ctx: Ctx) -> dict:
    p = ctx.plan
    env = {"ZAPVERIFY_HEADER_TIMEOUT_SECONDS": str(p.header_timeout)} if p.header_timeout else {}
    timeout = p.header_timeout or 10.0
    with ctx.server("header-flood", env) as srv:
        res, base, during, peak = asyncio.run(under_attack(srv, p, lambda: header_flood(srv, p)))
        idle = srv.idle_rss
    floods, trickles, hz = res["floods"], [t for t in res["trickles"] if t["connected"]], res["healthz"]
    cut_in_time = [t["closed_after_s"] is not None and t["closed_after_s"] <= timeout + 3 for t in trickles]
    trickle_status = Counter(str(t["status"]) if t["closed_after_s"] is not None else "not closed" for t in trickles)
    closed_at = [t["closed_after_s"] for t in trickles if t["closed_after_s"] is not None]
    checks = single_client_checks(base, during)
    checks.__setitem__(*_rss_check(ctx, peak))
    checks[f"every flooding connection answered 431 or closed before its {p.flood_bytes // MiB} MiB"] = \
        all(f["cut"] for f in floods)
    checks[f"every trickling connection cut within the header timeout ({timeout:g} s) + 3 s"] = \
        bool(trickles) and all(cut_in_time)
    checks[f"/healthz p99 <= {HEALTHZ_P99_S * 1e3:.0f} ms during the flood"] = \
        bool(hz) and pct(hz, 0.99) <= HEALTHZ_P99_S
    checks["an 8 MiB head, 100,000 fields and 150 fields each refused (431, or closed while sending)"] = \
        all(v in ("431", "closed") for v in res["singles"].values())
    lines = [f"Flood: {p.flood_conns} connections × {p.flood_bytes // MiB} MiB of one unfinished header: "
             f"{dict(Counter(f['outcome'] for f in floods))}; bytes each sent before the cut: at most "
             f"{max(f['sent_bytes'] for f in floods) / MiB:.2f} MiB.",
             f"Trickle: {len(trickles)} of {p.trickle_conns} connections opened, one header line a second for up to "
             f"{p.trickle_seconds:g} s; ends {dict(trickle_status)}; closed after "
             + (f"{min(closed_at):.1f}–{max(closed_at):.1f} s" if closed_at else "–")
             + f" (header timeout {timeout:g} s).",
             f"/healthz every 0.1 s during the flood ({len(hz)} probes): p50 "
             f"{ms(statistics.median(hz) if hz else None)}, p99 {ms(pct(hz, 0.99))}, "
             f"max {ms(max(hz) if hz else None)}.",
             "Single heads: " + ", ".join(f"{k}: {v}" for k, v in res["singles"].items()) + ".",
             f"Bystanders before: {bystander_line(base)}.", f"Bystanders during: {bystander_line(during)}.",
             f"Server RSS: idle {idle:.0f} MiB, peak {peak:.0f} MiB."]
    res["healthz_ms"] = {"p50": 1e3 * statistics.median(hz) if hz else None, "p99": 1e3 * pct(hz, 0.99),
                         "max": 1e3 * max(hz) if hz else None, "probes": len(hz)}
    del res["healthz"]
    res["trickle_summary"] = {"opened": len(trickles), "ends": dict(trickle_status),
                              "closed_after_s": [min(closed_at), max(closed_at)] if closed_at else None}
    res["trickles"] = res["trickles"][:10]  # a sample: the summary above counts them all
    return _result("header-flood", "HTTP header flood",
                   f"{p.flood_conns} connections each send {p.flood_bytes // MiB} MiB of an unfinished header and "
                   f"{p.trickle_conns} trickle header lines (a line a second) for up to {p.trickle_seconds:g} s, "
                   "while /healthz is timed and the bystanders send; then three oversized heads, one at a time.",
                   checks=checks, lines=lines, data={**res, "header_timeout_s": timeout, "baseline": base,
                                                     "during": during, "rss_mib": {"idle": idle, "peak": peak}})


# 5 ---------------------------------------------------------------- keys in logs
def key_env(key: str, **extra: str) -> dict[str, str]:
    digest = hashlib.sha256(key.encode()).hexdigest()
    return {"ZAPVERIFY_API_KEYS": json.dumps([f"{digest}:verify+receipts+admin:bench"]), **extra}


def b64url(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).rstrip(b"=").decode()


async def use_keys(srv: Server, key: str, wrong: str) -> dict[str, str]:
    """Every way a key reaches the server, each with the right key and some with a wrong
    one; what each got (``ok``, a status or a close code)."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    its = items(2, seed=5)
    body = json.dumps({"encoding": "hex", "items": json_items(its)}).encode()
    msg = json.dumps({"request_id": 1, "encoding": "hex", "items": json_items(its)})
    out: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=srv.url, timeout=10, trust_env=False) as c:
        out["GET /v1/status?access_token=KEY"] = http_label(await c.get(f"/v1/status?access_token={key}"))
        out["POST /v1/verify?access_token=KEY"] = http_label(
            await c.post(f"/v1/verify?access_token={key}", content=body, headers=JSON_CT))
        out["POST /v1/verify, Authorization: Bearer KEY"] = http_label(
            await c.post("/v1/verify", content=body, headers={**JSON_CT, "authorization": f"Bearer {key}"}))
        out["POST /v1/verify/zap, X-API-Key: KEY"] = http_label(
            await c.post("/v1/verify/zap", content=zap_frame(its, 3), headers={**ZAP_CT, "x-api-key": key}))
        out["GET /v1/receipts?access_token=KEY"] = http_label(await c.get(f"/v1/receipts?access_token={key}&limit=1"))
        out["GET /v1/status?access_token=WRONG"] = http_label(await c.get(f"/v1/status?access_token={wrong}"))
        out["POST /v1/verify, Authorization: Bearer WRONG"] = http_label(
            await c.post("/v1/verify", content=body, headers={**JSON_CT, "authorization": f"Bearer {wrong}"}))

    async def ws(name: str, path: str, **kw: Any) -> None:
        try:
            async with ws_connect(srv.ws_url + path, **kw) as conn:
                if path.startswith("/v1/ws/verify"):
                    await conn.send(msg)
                reply = await asyncio.wait_for(conn.recv(), 5)
            body = json.loads(reply) if isinstance(reply, str) else {}
            out[name] = f"ws {body['error'].get('code')}" if isinstance(body.get("error"), dict) else "ok"
        except InvalidStatus as exc:
            out[name] = f"ws {exc.response.status_code}"
        except ConnectionClosed as exc:
            out[name] = f"ws close {ws_close_code(exc)}"
        except TimeoutError:
            out[name] = "ws no reply"

    await ws("WS /v1/ws/verify?access_token=KEY", f"/v1/ws/verify?access_token={key}")
    await ws("WS /v1/ws/verify, subprotocol zapverify.key.<KEY>", "/v1/ws/verify",
             subprotocols=["zapverify.v1", f"zapverify.key.{b64url(key)}"])
    await ws("WS /v1/ws/verify, Authorization: Bearer KEY", "/v1/ws/verify",
             additional_headers={"Authorization": f"Bearer {key}"})
    await ws("WS /v1/ws/stats, subprotocol zapverify.key.<KEY> (the dashboard)", "/v1/ws/stats",
             subprotocols=["zapverify.v1", f"zapverify.key.{b64url(key)}"])
    await ws("WS /v1/ws/verify?access_token=WRONG", f"/v1/ws/verify?access_token={wrong}")
    await ws("WS /v1/ws/stats, subprotocol zapverify.key.<WRONG>", "/v1/ws/stats",
             subprotocols=["zapverify.v1", f"zapverify.key.{b64url(wrong)}"])
    return out


def key_forms(key: str, label: str) -> dict[str, str]:
    return {f"{label}": key, f"{label}, first 16 characters": key[:16], f"{label} as base64url": b64url(key),
            f"{label} as base64url, first 16 characters": b64url(key)[:16]}


def section_keys_in_logs(ctx: Ctx) -> dict:
    runs, checks, lines = {}, {}, []
    for level in ("debug", "info"):
        key, wrong = "zvk_" + secrets.token_urlsafe(32), "zvk_" + secrets.token_urlsafe(32)
        srv = ctx.server(f"keys-{level}", key_env(key), log_level=level, tcp=False)
        with srv:
            answers = asyncio.run(use_keys(srv, key, wrong))
        log = srv.log_text()  # after stop: everything the process wrote
        forms = {**key_forms(key, "key"), **key_forms(wrong, "wrong key")}
        found = {name: [n + 1 for n, line in enumerate(log.splitlines()) if text in line][:5]
                 for name, text in forms.items()}
        found = {k: v for k, v in found.items() if v}
        right_ok = all(v == "ok" for k, v in answers.items() if "WRONG" not in k)
        wrong_refused = all(v in ("401 UNAUTHORIZED", "ws 403") for k, v in answers.items() if "WRONG" in k)
        logged_requests = log.count('"GET /v1/status?access_token=')
        runs[level] = {"answers": answers, "key_forms_found_on_lines": found, "log_lines": len(log.splitlines()),
                       "log_bytes": len(log), "request_lines_logged": logged_requests,
                       "debug_records": log.count(" DEBUG ")}
        checks[f"{level}: every request with the key answered OK"] = right_ok
        checks[f"{level}: every request with a wrong key refused (401 / 403)"] = wrong_refused
        checks[f"{level}: request lines are in the log (the access log was on)"] = logged_requests >= 2
        checks[f"{level}: no form of either key in the server's stdout/stderr"] = not found
        bad = {k: v for k, v in answers.items() if v != "ok" and "WRONG" not in k}
        lines.append(f"Log level {level}: {len(answers)} requests ({sum(v == 'ok' for v in answers.values())} OK"
                     + (f"; not OK with the key: {bad}" if bad else "") + f"); log {len(log.splitlines())} lines, "
                     f"{logged_requests} `?access_token=` request lines, {runs[level]['debug_records']} DEBUG "
                     "records; key forms found: " + (", ".join(f"{k} (lines {v})" for k, v in found.items())
                                                    if found else "none") + ".")
    return _result("keys-in-logs", "API keys in the server's log",
                   "API keys configured; the key (and a wrong one) presented through ?access_token=, Authorization, "
                   "X-API-Key and the zapverify.key.<base64url> WebSocket subprotocol, with the server (uvicorn and "
                   "the app) at log level debug, then on a fresh server at info; then the key is searched for in "
                   "everything the server wrote.", checks=checks, lines=lines, data=runs)


# 6 ---------------------------------------------------------------- WebSocket rate limit
RATE, BURST = 5.0, 20


async def ws_rate(srv: Server, key: str, n: int) -> dict:
    from websockets.exceptions import ConnectionClosed

    item = json_items(items(1, seed=9))
    replies: Counter[str] = Counter()
    retry_after_missing = 0
    t0 = time.monotonic()
    closed = None
    async with ws_connect(srv.ws_url + "/v1/ws/verify", additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        async def sender() -> None:
            for i in range(n):
                await ws.send(json.dumps({"request_id": i, "encoding": "hex", "items": item}))

        send_task = asyncio.create_task(sender())
        try:
            async with asyncio.timeout(30):
                while sum(replies.values()) < n:
                    body = json.loads(await ws.recv())
                    if "error" in body:
                        replies[body["error"]["code"]] += 1
                        retry_after_missing += body["error"]["code"] == "RATE_LIMITED" and "retry_after" not in \
                            body["error"]
                    else:
                        replies["ok"] += 1
        except ConnectionClosed as exc:
            closed = ws_close_code(exc)
        except TimeoutError:
            closed = "timed out waiting for replies"
        send_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
            await send_task
    return {"messages": n, "replies": dict(replies), "elapsed_s": round(time.monotonic() - t0, 3),
            "retry_after_missing": retry_after_missing, "closed": closed}


def section_ws_rate_limit(ctx: Ctx) -> dict:
    p = ctx.plan
    key = "zvk_" + secrets.token_urlsafe(32)
    env = key_env(key, ZAPVERIFY_RATE_LIMIT_PER_SECOND=str(RATE), ZAPVERIFY_RATE_LIMIT_BURST=str(BURST))
    with ctx.server("ws-rate-limit", env, tcp=False) as srv:
        res = asyncio.run(ws_rate(srv, key, p.rate_messages))
    allowed = BURST + RATE * res["elapsed_s"]
    ok, limited = res["replies"].get("ok", 0), res["replies"].get("RATE_LIMITED", 0)
    checks = {f"every one of the {p.rate_messages} messages answered": sum(res["replies"].values()) == p.rate_messages,
              "answered OK at most burst + rate × elapsed": ok <= allowed,
              "the rest answered RATE_LIMITED, each with retry_after": ok + limited == p.rate_messages
              and limited > 0 and res["retry_after_missing"] == 0}
    lines = [f"Key limited to {RATE:g}/s, burst {BURST}; {p.rate_messages} JSON messages on one WebSocket, sent at "
             f"once: replies {res['replies']} in {res['elapsed_s']:g} s (allowed OK: {allowed:.1f})"
             + (f"; connection closed: {res['closed']}" if res["closed"] else "") + "."]
    return _result("ws-rate-limit", "WebSocket: rate limit per message",
                   f"A key limited to {RATE:g} requests/s (burst {BURST}) sends {p.rate_messages} messages on one "
                   "WebSocket as fast as it can.", checks=checks, lines=lines, data=res)


# 7 ---------------------------------------------------------------- deep JSON on the WebSocket
DEPTH = 100_000


def deep_messages() -> dict[str, tuple[str, int | None]]:
    arrays = "[" * DEPTH + "]" * DEPTH
    objects = '{"a":' * DEPTH + "1" + "}" * DEPTH
    return {"request_id first, items nested arrays": ('{"request_id": 7, "items": ' + arrays + "}", 7),
            "request_id first, an item of nested objects": ('{"request_id": 8, "items": [' + objects + "]}", 8),
            "request_id after the nesting": ('{"items": ' + arrays + ', "request_id": 9}', None),
            "nested arrays, no object": (arrays, None)}


async def ws_deep_once(url: str, text: str, rid: int | None) -> dict:
    """One deeply nested message on a fresh WebSocket: reply, close code, or silence."""
    from websockets.exceptions import ConnectionClosed

    t0 = time.monotonic()
    try:
        async with ws_connect(url) as ws:
            await ws.send(text)
            reply = await asyncio.wait_for(ws.recv(), REPLY_WITHIN_S)
        body = json.loads(reply)
        code = (body.get("error") or {}).get("code")
        label = f"reply, request_id {body.get('request_id')}, error {code}"
        answered, named = True, rid is not None and body.get("request_id") == rid and bool(code)
    except ConnectionClosed as exc:
        label = f"closed {ws_close_code(exc)}" + (f" ({exc.rcvd.reason})" if exc.rcvd is not None else "")
        answered, named = ws_close_code(exc) is not None, False
    except TimeoutError:
        label, answered, named = "silence", False, False
    dt = time.monotonic() - t0
    return {"label": label, "answered": answered and dt <= REPLY_WITHIN_S + 1, "named": named, "seconds": dt}


async def ws_deep(srv: Server, seconds: float) -> dict:
    """The messages of :func:`deep_messages`, each on its own connection, round after round
    for ``seconds`` (one round at least, 100 at most); then the first over HTTP."""
    url = srv.ws_url + "/v1/ws/verify"
    messages = deep_messages()
    out: dict[str, Any] = {name: {"expected_id": rid, "outcomes": Counter(), "all_answered": True,
                                  "all_named": True, "max_seconds": 0.0} for name, (_, rid) in messages.items()}
    t0, rounds = time.monotonic(), 0
    while rounds == 0 or (time.monotonic() - t0 < seconds and rounds < 100):
        rounds += 1
        for name, (text, rid) in messages.items():
            got = await ws_deep_once(url, text, rid)
            row = out[name]
            row["outcomes"][got["label"]] += 1
            row["all_answered"] &= got["answered"]
            row["all_named"] &= got["named"] or rid is None
            row["max_seconds"] = round(max(row["max_seconds"], got["seconds"]), 3)
        await asyncio.sleep(0.05)
    for row in out.values():
        row["outcomes"] = dict(row["outcomes"])
    async with httpx.AsyncClient(timeout=10, trust_env=False) as c:
        r = await c.post(srv.url + "/v1/verify", content=messages["request_id first, items nested arrays"][0],
                         headers=JSON_CT)
        http = {"status": r.status_code, "error": error_code(r)}
        healthz = (await c.get(srv.url + "/healthz")).status_code
    return {"rounds": rounds, "websocket": out, "http": http, "healthz_after": healthz}


def section_ws_deep_json(ctx: Ctx) -> dict:
    p = ctx.plan
    with ctx.server("ws-deep-json") as srv:
        res, base, during, _peak = asyncio.run(under_attack(srv, p, lambda: ws_deep(srv, p.attack)))
    rows = res["websocket"]
    checks = single_client_checks(base, during)
    checks[f"every message answered or closed with a code within {REPLY_WITHIN_S:g} s"] = \
        all(v["all_answered"] for v in rows.values())
    checks["an error reply naming the request wherever its id was readable (first key)"] = \
        all(v["all_named"] for v in rows.values())
    checks["the server still answers /healthz after"] = res["healthz_after"] == 200
    lines = [f"{res['rounds']} rounds of the four messages below, each on a fresh WebSocket."]
    lines += [f"{k}: " + ", ".join(f"{n}× {label}" for label, n in v["outcomes"].items())
              + f" (slowest {ms(v['max_seconds'])})." for k, v in rows.items()]
    lines += [f"HTTP POST /v1/verify with the first body: {res['http']['status']} {res['http']['error']}.",
              f"Bystanders before: {bystander_line(base)}.", f"Bystanders during: {bystander_line(during)}."]
    return _result("ws-deep-json", "WebSocket: JSON nested 100,000 deep",
                   f"JSON nested {DEPTH:,} deep sent as WebSocket text messages, each on its own connection, with "
                   f"and without a readable request_id, round after round for {p.attack:g} s while the bystanders "
                   "send; the same body over HTTP.",
                   checks=checks, lines=lines, data={**res, "baseline": base, "during": during})


# 8 ---------------------------------------------------------------- store faults
async def watch_store(srv: Server, since: float, *, want_ready: bool, wait: float, hold: float, body: bytes) -> dict:
    """Poll /readyz every 0.1 s until it answers 200 (``want_ready``) or 503, at most ``wait``
    s after ``since``, then ``hold`` s more; meanwhile a verify request starts every 0.2 s
    (each on its own, so that one that hangs hides none of the others), each waited for up
    to 15 s.  ``flipped_after_s``: seconds from ``since`` to the flip (None: not within ``wait``)."""
    verifies: list[dict] = []
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=20)
    async with httpx.AsyncClient(base_url=srv.url, timeout=15, trust_env=False, limits=limits) as http:
        async def one() -> None:
            t = time.monotonic()
            row: dict[str, Any] = {"at_s": round(t - since, 2)}
            try:
                r = await http.post("/v1/verify", content=body, headers=JSON_CT)
                row.update(status=r.status_code, code=error_code(r), retry_after=r.headers.get("retry-after"))
            except httpx.HTTPError as exc:
                row.update(status=None, code=type(exc).__name__, retry_after=None)
            row["seconds"] = round(time.monotonic() - t, 3)
            verifies.append(row)

        async def verifier() -> None:
            tasks = []
            while not stop.is_set() and len(tasks) < 200:
                tasks.append(asyncio.create_task(one()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
            await asyncio.gather(*tasks)

        task = asyncio.create_task(verifier())
        flipped, store = None, None
        while time.monotonic() - since < wait:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                r = await http.get("/readyz", timeout=5)
                if (r.status_code == 200) == want_ready:
                    flipped, store = time.monotonic() - since, r.json().get("store")
                    break
            await asyncio.sleep(0.1)
        if flipped is not None:
            await asyncio.sleep(hold)
        stop.set()
        await task
    verifies.sort(key=lambda r: r["at_s"])
    return {"flipped_after_s": None if flipped is None else round(flipped, 2), "store": store, "verifies": verifies}


async def verify_n(srv: Server, body: bytes, n: int) -> Counter[str]:
    out: Counter[str] = Counter()
    async with httpx.AsyncClient(base_url=srv.url, timeout=15, trust_env=False) as http:
        for _ in range(n):
            try:
                out[http_label(await http.post("/v1/verify", content=body, headers=JSON_CT))] += 1
            except httpx.HTTPError as exc:
                out[f"error {type(exc).__name__}"] += 1
    return out


def _down_answers(rows: list[dict], allow_200: bool) -> tuple[bool, bool]:
    """(every answer 503 STORE_UNAVAILABLE + Retry-After [or 200], every 503 within FAIL_FAST_S)."""
    proper = all((r["status"] == 503 and r["code"] == "STORE_UNAVAILABLE" and r["retry_after"])
                 or (allow_200 and r["status"] == 200) for r in rows)
    fast = all(r["seconds"] <= FAIL_FAST_S for r in rows if r["status"] != 200)
    return bool(rows) and proper, fast


def _answers_line(rows: list[dict]) -> str:
    c = Counter(f"{r['status']} {r['code'] or ''}".strip() + (" +Retry-After" if r.get("retry_after") else "")
                for r in rows)
    slow = [r for r in rows if r["seconds"] > FAIL_FAST_S]
    return (f"{dict(c)}, slowest {ms(max((r['seconds'] for r in rows), default=0.0))}"
            + (f"; over {FAIL_FAST_S:g} s: " + ", ".join(f"sent at +{r['at_s']:g} s took {r['seconds']:.1f} s"
                                                        for r in slow[:5]) if slow else ""))


def fill_disk(folder: Path) -> int:
    """Write zeros into ``folder/filler`` until the file system is full; bytes written."""
    written = 0
    with open(folder / "filler", "wb", buffering=0) as f:
        for block in (MiB, 64 * 1024, 4096, 512):
            buf = bytes(block)
            while True:
                try:
                    n = f.write(buf)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                written += n or 0
                if not n:
                    break
    return written


TMPFS_SIZE = "16m"


def section_store_full(ctx: Ctx) -> dict:
    p = ctx.plan
    title = "Store fault: SQLite receipts on a full disk"
    measures = (f"Receipts in SQLite on a {TMPFS_SIZE} tmpfs; the disk is filled with a file while a verify request "
                "goes every 0.2 s and /readyz is polled every 0.1 s, then the file is deleted.")
    mnt = ctx.work / "tmpfs"
    mnt.mkdir(exist_ok=True)
    if os.geteuid() != 0:
        return _result("store-full", title, measures, checks={}, lines=[], data={},
                       skipped="mounting a tmpfs needs root; not run")
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mnt)],
                           capture_output=True, text=True, timeout=30)
    if mount.returncode != 0:
        return _result("store-full", title, measures, checks={}, lines=[], data={},
                       skipped=f"mount -t tmpfs failed: {mount.stderr.strip() or mount.returncode}")
    body = json.dumps({"encoding": "hex", "items": json_items(items(4, seed=21))}).encode()
    try:
        with ctx.server("store-full", {"ZAPVERIFY_DATA_DIR": str(mnt)}) as srv:
            warm = asyncio.run(verify_n(srv, body, 5))
            written = fill_disk(mnt)
            t_full = time.monotonic()
            down = asyncio.run(watch_store(srv, t_full, want_ready=False, wait=15, hold=p.hold, body=body))
            (mnt / "filler").unlink()
            t_free = time.monotonic()
            up = asyncio.run(watch_store(srv, t_free, want_ready=True, wait=15, hold=0.5, body=body))
            after = asyncio.run(verify_n(srv, body, p.after))
            st = os.statvfs(mnt)
            used_after = (st.f_blocks - st.f_bfree) * st.f_frsize
            files = {f.name: f.stat().st_size for f in mnt.iterdir() if f.is_file()}
    finally:
        for cmd in (["umount", str(mnt)], ["umount", "-l", str(mnt)]):
            if subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0:
                break
    proper, fast = _down_answers(down["verifies"], allow_200=True)
    checks = {f"/readyz 503 within {READYZ_FLIP_S:g} s of the disk filling":
              down["flipped_after_s"] is not None and down["flipped_after_s"] <= READYZ_FLIP_S,
              "/readyz names the reason disk_full": (down["store"] or {}).get("reason") == "disk_full",
              "while full: 200 or 503 STORE_UNAVAILABLE with Retry-After, nothing else": proper,
              f"while full: every 503 within {FAIL_FAST_S:g} s": fast,
              f"/readyz 200 within {READYZ_FLIP_S:g} s of freeing the disk":
              up["flipped_after_s"] is not None and up["flipped_after_s"] <= READYZ_FLIP_S,
              f"{p.after} verify requests after the recovery all 200": after.get("ok", 0) == p.after}
    lines = [f"Before: {dict(warm)}; the filler took {written / MiB:.1f} MiB.",
             f"Disk full: /readyz 503 after {down['flipped_after_s']} s, store {down['store']}; verify answers "
             f"meanwhile {_answers_line(down['verifies'])}.",
             f"Disk freed: /readyz 200 after {up['flipped_after_s']} s; verify answers meanwhile "
             f"{_answers_line(up['verifies'])}.",
             f"After: {p.after} verify requests {dict(after)}; {used_after / MiB:.2f} MiB used on the tmpfs, files "
             f"{files}."]
    return _result("store-full", title, measures, checks=checks, lines=lines,
                   data={"tmpfs": TMPFS_SIZE, "filler_bytes": written, "before": dict(warm), "full": down, "freed": up,
                         "after": dict(after), "used_after_bytes": used_after, "files_after": files})


def _pg_bindir() -> str | None:
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: [int(x) for x in
                                                                              re.findall(r"\d+", p.parent.name)],
                    reverse=True):
        if (d / "initdb").exists() and (d / "pg_ctl").exists():
            return str(d)
    return None


def _as_owner(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def section_store_stopped(ctx: Ctx) -> dict:
    p = ctx.plan
    title = "Store fault: PostgreSQL stopped"
    measures = ("Receipts in a throwaway PostgreSQL cluster (scripts/pg_test_cluster); the cluster is stopped "
                "(pg_ctl stop -m fast) while a verify request goes every 0.2 s and /readyz is polled every 0.1 s, "
                "then started again.")
    if _pg_bindir() is None:
        reason = "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl)"
        if ctx.require_postgres:
            return _result("store-stopped", title, measures,
                           checks={"PostgreSQL available (--require-postgres)": False}, lines=[reason + "."], data={})
        return _result("store-stopped", title, measures, checks={}, lines=[], data={}, skipped=reason)
    state = ctx.work / "pg.state"
    env = {**os.environ, "ZAPVERIFY_PG_STATE": str(state)}
    started = subprocess.run([str(ROOT / "scripts" / "pg_test_cluster"), "start"], env=env, capture_output=True,
                             text=True, timeout=180)
    if started.returncode != 0:
        reason = f"scripts/pg_test_cluster start failed: {started.stderr.strip()[-300:]}"
        if ctx.require_postgres:
            return _result("store-stopped", title, measures, checks={"PostgreSQL cluster started": False},
                           lines=[reason], data={})
        return _result("store-stopped", title, measures, checks={}, lines=[], data={}, skipped=reason)
    try:
        url = started.stdout.strip().splitlines()[-1]
        st = dict(line.split("=", 1) for line in state.read_text().split())
        pgdir, port, pgbin = st["PGDIR"], st["PGPORT"], st["PGBIN"]
        pg_ctl = f"{pgbin}/pg_ctl"
        body = json.dumps({"encoding": "hex", "items": json_items(items(4, seed=23))}).encode()
        with ctx.server("store-stopped", {"ZAPVERIFY_DATABASE_URL": url}) as srv:
            warm = asyncio.run(verify_n(srv, body, 5))
            subprocess.run(_as_owner([pg_ctl, "-D", f"{pgdir}/data", "-m", "fast", "-w", "stop"]), check=True,
                           capture_output=True, timeout=60)
            t_stop = time.monotonic()
            down = asyncio.run(watch_store(srv, t_stop, want_ready=False, wait=20, hold=p.hold, body=body))
            subprocess.run(_as_owner([pg_ctl, "-D", f"{pgdir}/data", "-l", f"{pgdir}/server.log", "-w", "-t", "60",
                                      "-o", f"-c listen_addresses=127.0.0.1 -c port={port} "
                                            f"-c unix_socket_directories={pgdir} -c max_connections=100", "start"]),
                           check=True, capture_output=True, timeout=90)
            t_start = time.monotonic()
            up = asyncio.run(watch_store(srv, t_start, want_ready=True, wait=20, hold=0.5, body=body))
            after = asyncio.run(verify_n(srv, body, p.after))
    finally:
        subprocess.run([str(ROOT / "scripts" / "pg_test_cluster"), "stop"], env=env, capture_output=True, timeout=120)
    proper, fast = _down_answers(down["verifies"], allow_200=False)
    checks = {f"/readyz 503 within {READYZ_FLIP_S:g} s of the stop":
              down["flipped_after_s"] is not None and down["flipped_after_s"] <= READYZ_FLIP_S,
              "while stopped: every verify answered 503 STORE_UNAVAILABLE with Retry-After": proper,
              f"while stopped: every verify answered within {FAIL_FAST_S:g} s": fast,
              f"/readyz 200 within {READYZ_FLIP_S:g} s of the restart":
              up["flipped_after_s"] is not None and up["flipped_after_s"] <= READYZ_FLIP_S,
              f"{p.after} verify requests after the recovery all 200": after.get("ok", 0) == p.after}
    lines = [f"Before: {dict(warm)}.",
             f"Stopped: /readyz 503 after {down['flipped_after_s']} s, store {down['store']}; verify answers meanwhile "
             f"{_answers_line(down['verifies'])}.",
             f"Restarted: /readyz 200 after {up['flipped_after_s']} s; verify answers meanwhile "
             f"{_answers_line(up['verifies'])}.", f"After: {p.after} verify requests {dict(after)}."]
    return _result("store-stopped", title, measures, checks=checks, lines=lines,
                   data={"before": dict(warm), "stopped": down, "restarted": up, "after": dict(after)})


# 9 ---------------------------------------------------------------- overload
BATCH = 4096
#: Clients of the overload section, each on its own connection.
OVERLOAD_CLIENTS = 48


async def closed_loop(url: str, body: bytes, clients: int, seconds: float) -> dict:
    """``clients`` clients, each on its own connection, sending ``body`` one request after the
    other for ``seconds``; a 503 is followed by a wait of its ``Retry-After`` (a well-behaved
    client).  Requests in flight when the time is up are waited for and counted: the rate is
    the items answered 200 over the time to the last answer."""
    statuses: Counter[int] = Counter()
    lat: list[float] = []
    codes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    missing_retry_after = 0
    end = time.monotonic() + seconds

    async def client() -> None:
        nonlocal missing_retry_after
        async with httpx.AsyncClient(timeout=120, trust_env=False) as c:
            while time.monotonic() < end:
                t = time.perf_counter()
                try:
                    r = await c.post(url, content=body, headers=JSON_CT)
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] += 1
                    continue
                statuses[r.status_code] += 1
                if r.status_code == 200:
                    lat.append(time.perf_counter() - t)
                    continue
                codes[http_label(r)] += 1
                if r.status_code == 503:
                    missing_retry_after += "retry-after" not in r.headers
                    await asyncio.sleep(min(float(r.headers.get("retry-after") or 1), max(0.0, end - time.monotonic())))

    t0 = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.monotonic() - t0
    return {"clients": clients, "seconds": round(elapsed, 2), "statuses": dict(statuses), "codes": dict(codes),
            "transport_errors": dict(errors), "missing_retry_after": missing_retry_after,
            "rate": statuses.get(200, 0) / elapsed, "latencies": lat}


async def sequential(url: str, body: bytes, n: int) -> tuple[list[float], Counter[str]]:
    """``n`` requests one after the other: the latencies of the 200s, and every answer counted."""
    out: list[float] = []
    answers: Counter[str] = Counter()
    async with httpx.AsyncClient(timeout=60, trust_env=False) as c:
        for _ in range(n):
            t = time.perf_counter()
            r = await c.post(url, content=body, headers=JSON_CT)
            answers[http_label(r)] += 1
            if r.status_code == 200:
                out.append(time.perf_counter() - t)
    return out, answers


def overload_run(ctx: Ctx, body: bytes, name: str, env: dict[str, str] | None = None) -> dict:
    """The unloaded rate (closed loop, 1 and 2 clients, the larger), then
    :data:`OVERLOAD_CLIENTS` clients closed-loop at once, on a fresh server at its defaults."""
    p = ctx.plan
    with ctx.server(name, env) as srv:
        url = srv.url + "/v1/verify"
        _, warm = asyncio.run(sequential(url, body, 3))  # warm-up: the cost model learns the scheme
        one = asyncio.run(closed_loop(url, body, 1, p.sustain))
        two = asyncio.run(closed_loop(url, body, 2, p.sustain))
        unloaded = max(one["rate"], two["rate"])
        with RssSampler(srv.pid) as sampler:
            load = asyncio.run(closed_loop(url, body, OVERLOAD_CLIENTS, p.overload))
        admission = httpx.get(srv.url + "/v1/status", timeout=10, trust_env=False).json().get("admission", {})
        idle = srv.idle_rss
    deadline = float(admission.get("default_deadline", 30.0))
    acc, st = load["latencies"], load["statuses"]
    other = {k: v for k, v in st.items() if k not in (200, 503)}
    closed = Counter({str(k): v for r in (one, two) for k, v in r["statuses"].items()})
    served = load["rate"]
    checks = {"unloaded requests all answered 200": set(warm) <= {"ok"} and set(closed) <= {"200"} and unloaded > 0,
              "every answer 200, or 503 with Retry-After (no other status, no transport error)":
              not other and not load["transport_errors"] and load["missing_retry_after"] == 0,
              f"admitted requests answered within their deadline ({deadline:g} s; none missed it)":
              bool(acc) and max(acc) <= deadline and admission.get("deadline_missed_total", 1) == 0,
              "served throughput >= 0.8 × unloaded": served >= 0.8 * unloaded}
    checks.__setitem__(*_rss_check(ctx, sampler.peak))
    data = {"env": env or {}, "warm_up": dict(warm), "deadline_s": deadline,
            "closed_loop": [{k: v for k, v in r.items() if k != "latencies"} for r in (one, two)],
            "unloaded_per_s": unloaded, "served_per_s": served, "ratio": served / unloaded if unloaded else None,
            "admitted_ms": {"n": len(acc), "p50": 1e3 * statistics.median(acc), "p99": 1e3 * pct(acc, 0.99),
                            "max": 1e3 * max(acc)} if acc else None,
            "loaded": {k: v for k, v in load.items() if k != "latencies"},
            "admission": admission, "rss_mib": {"idle": idle, "peak": sampler.peak}}
    a = data["admitted_ms"]
    lines = [f"Unloaded (closed loop, {p.sustain:g} s): 1 client {one['rate']:.2f} requests/s, 2 clients "
             f"{two['rate']:.2f}/s (statuses {one['statuses']}, {two['statuses']}); taken: {unloaded:.2f}/s.",
             f"{OVERLOAD_CLIENTS} clients closed-loop for {p.overload:g} s (the requests in flight then waited "
             f"for: {load['seconds']:g} s in all): statuses {st}; non-200 {load['codes']}; 503 without Retry-After "
             f"{load['missing_retry_after']}; transport errors {load['transport_errors'] or 'none'}.",
             f"Served {served:.2f} requests/s = {served / unloaded if unloaded else 0:.2f}× unloaded."
             + (f" Admitted ({a['n']}): p50 {a['p50']:.0f} ms, p99 {a['p99']:.0f} ms, max {a['max']:.0f} ms "
                f"(deadline {deadline:g} s)." if a else " Admitted: none."),
             f"Admission at the end: admitted {admission.get('admitted_total')}, refused "
             f"{admission.get('refused_total')} by {admission.get('refused_by')}, queue peak "
             f"{admission.get('queued_peak')}, deadline misses {admission.get('deadline_missed_total')}; cost model "
             f"{admission.get('items_per_second')} items/s.",
             f"Server RSS: idle {idle:.0f} MiB, peak {sampler.peak:.0f} MiB."]
    return {"checks": checks, "lines": lines, "data": data}


def section_overload(ctx: Ctx) -> dict:
    body = json.dumps({"encoding": "hex", "items": json_items(items(BATCH, seed=11))}).encode()
    run = overload_run(ctx, body, "overload")
    lines = [f"Batch: {BATCH} Ed25519 items as JSON ({len(body)} bytes), POST /v1/verify, each client on its own "
             f"connection; server CPU workers {ctx.cpu_workers}, receipts on (SQLite), admission at its defaults "
             "(deadline, fair queue); the clients share the machine's cores with the server.", *run["lines"]]
    return _result("overload", f"Overload: {OVERLOAD_CLIENTS} batch clients at once",
                   f"The unloaded rate of {BATCH}-item Ed25519 JSON batches measured closed-loop, then "
                   f"{OVERLOAD_CLIENTS} clients sending them closed-loop for {ctx.plan.overload:g} s; admission at "
                   "its defaults.", checks=run["checks"], lines=lines, data={"body_bytes": len(body), **run["data"]})


# ------------------------------------------------------------------ driver
SECTIONS: dict[str, Callable[[Ctx], dict]] = {
    "slow-body": section_slow_body,
    "ingest-header": section_ingest_header,
    "ws-big-json": section_ws_big_json,
    "header-flood": section_header_flood,
    "keys-in-logs": section_keys_in_logs,
    "ws-rate-limit": section_ws_rate_limit,
    "ws-deep-json": section_ws_deep_json,
    "store-full": section_store_full,
    "store-stopped": section_store_stopped,
    "overload": section_overload,
}


def run_section(name: str, ctx: Ctx) -> dict:
    t0 = time.monotonic()
    try:
        res = SECTIONS[name](ctx)
    except Exception as exc:  # a failure of the run itself: recorded, counted as a failure
        res = _result(name, name, "", checks={"the section ran to the end": False},
                      lines=[f"Error: {type(exc).__name__}: {exc}"[:1000]],
                      data={"traceback": traceback.format_exc()[-4000:]})
    res["seconds"] = round(time.monotonic() - t0, 1)
    verdict = "skipped" if res["skipped"] else "pass" if res["pass"] else "FAIL"
    print(f"[attacks] {name}: {verdict} in {res['seconds']:g} s", flush=True)
    for line in res["lines"]:
        print(f"[attacks]   {line}", flush=True)
    for k, v in res["checks"].items():
        if not v:
            print(f"[attacks]   FAILED: {k}", flush=True)
    return res


def markdown(result: dict) -> str:
    prov = result["provenance"]
    out = ["# Attacks on a live server, one at a time (bench/attacks.py)", "", provenance.markdown_line(prov), "",
           f"{result['when']}, {result['host']}, Python {result['python']}. Written by `bench/attacks.py`"
           + (" (`--quick`)" if result["quick"] else "") + f"; {result['seconds']:.0f} s in all. Loopback only; each "
           f"section against a fresh `zapverify serve` (CPU backend, {result['cpu_workers']} CPU workers, receipts "
           "on); bystanders: a small verify request (4 Ed25519 items) every 0.2 s on each of JSON, ZAP, WebSocket and "
           f"TCP ingest. RSS bound stated: {result['rss_bound_mib']:g} MiB for the server's process tree.", "",
           "| section | result | checks passed |", "|---|---|---|"]
    for s in result["sections"]:
        verdict = f"skipped: {s['skipped']}" if s["skipped"] else "pass" if s["pass"] else "**FAIL**"
        n = len(s["checks"])
        out.append(f"| {s['title']} (`{s['name']}`) | {verdict} | {sum(s['checks'].values())} of {n} |")
    out += ["", f"Overall: {'pass' if result['pass'] else '**FAIL**'}.", ""]
    for i, s in enumerate(result["sections"], 1):
        out += [f"## {i}. {s['title']}", "", s["measures"] + f" ({s['seconds']:g} s.)", ""]
        if s["skipped"]:
            out += [f"Skipped: {s['skipped']}.", ""]
            continue
        out += [f"- {line}" for line in s["lines"]] + [""]
        out += ["| check | result |", "|---|---|"]
        out += [f"| {k} | {'pass' if v else '**FAIL**'} |" for k, v in s["checks"].items()] + [""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short durations and fewer connections (for the test)")
    ap.add_argument("--only", default="", help=f"comma-separated sections, of: {', '.join(SECTIONS)}")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--rss-bound", type=float, default=768.0, help="MiB, the server's process tree")
    ap.add_argument("--cpu-workers", type=int, default=2)
    ap.add_argument("--require-postgres", action="store_true", help="fail, not skip, store-stopped without PostgreSQL")
    ap.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                    help="copy every server's stdout/stderr there (they are deleted otherwise)")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    prov = provenance.collect()
    t0 = time.monotonic()
    sections = []
    with tempfile.TemporaryDirectory(prefix="zv-attacks-") as work:
        ctx = Ctx(QUICK if args.quick else FULL, Path(work), args.rss_bound, args.cpu_workers, args.require_postgres,
                  args.quick)
        for name in names:
            sections.append(run_section(name, ctx))
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for log in Path(work).glob("*.log"):
                (args.keep_logs / log.name).write_bytes(log.read_bytes())
    result = {"provenance": prov, "when": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
              "python": platform.python_version(), "quick": args.quick, "only": names, "cpu_workers": args.cpu_workers,
              "rss_bound_mib": args.rss_bound, "seconds": round(time.monotonic() - t0, 1),
              "sections": sections, "pass": all(s["pass"] is not False for s in sections)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "attacks.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    md = markdown(result)
    (args.out / "attacks.md").write_text(md)
    print(f"[attacks] {'pass' if result['pass'] else 'FAIL'} in {result['seconds']:g} s; wrote "
          f"{args.out / 'attacks.json'} and attacks.md", flush=True)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
