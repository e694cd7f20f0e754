"""The Python client backs off (zapverify/http.py, Retry; docs/operations.md, "Load shedding";
issue 48): answered 503 OVERLOADED with ``Retry-After: 1`` it retries after at least that
long, or — retrying off, or out of budget or deadline — raises a RemoteError whose
``retry_after`` is the header's seconds.  Served by a real local HTTP server that refuses the
first ``refusals`` requests as zapverify's admission does."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from app.core.errors import RemoteError
from app.wire import zap
from zapverify import AsyncClient, Client, Retry

OK = {"batch_id": "0190a0a0-0000-7000-8000-000000000000", "count": 1, "valid": 1, "invalid": 0, "verdicts": [True],
      "merkle_root": "00" * 32, "backends": {"ed25519": "cpu"}, "elapsed_ms": 1.0, "verify_ms": 1.0, "merkle_ms": 0.1}
REFUSED = {"error": {"code": "OVERLOADED", "message": "estimated to finish after its deadline", "field": "admission"}}


class Refusing:
    """A local server: the first ``refusals`` POSTs (or those numbered in ``refuse``, from 1)
    get 503 OVERLOADED + Retry-After: 1; the others are answered after ``delay`` seconds."""

    def __init__(self, refusals: int, refuse: set[int] | None = None, delay: float = 0.0):
        self.refusals, self.times, self.headers = refusals, [], []
        self.refuse = refuse if refuse is not None else set(range(1, refusals + 1))
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                owner.times.append(time.monotonic())
                owner.headers.append(dict(self.headers))
                zap_body = self.headers.get("content-type") == zap.CONTENT_TYPE
                if len(owner.times) in owner.refuse:
                    out = (bytes(zap.error_frame(_overloaded(), 0)) if zap_body else json.dumps(REFUSED).encode())
                    self.send_response(503)
                    self.send_header("Retry-After", "1")
                else:
                    time.sleep(delay)
                    frame = zap.decode(body) if zap_body else None
                    out = (bytes(zap.encode_response(frame.request_id, np.ones(1, bool), b"\0" * 32, None))
                           if zap_body else json.dumps(OK).encode())
                    self.send_response(200)
                self.send_header("content-type", zap.CONTENT_TYPE if zap_body else "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _overloaded():
    from app.core.errors import Overloaded
    return Overloaded("busy", retry_after=1.0)


@pytest.fixture
def refusing():
    servers: list[Refusing] = []

    def make(refusals: int, **kw) -> Refusing:
        servers.append(Refusing(refusals, **kw))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


ITEM = {"scheme": "ed25519", "public_key": b"\0" * 32, "message": b"m", "signature": b"\0" * 64}


def test_retrying_off_raises_remote_error_with_retry_after(refusing):
    srv = refusing(1)
    with Client(srv.url, retry=None, api_key="") as zv:
        with pytest.raises(RemoteError) as exc:
            zv.verify([ITEM])
    assert exc.value.code == "OVERLOADED" and exc.value.status == 503 and exc.value.retry_after == 1.0
    assert len(srv.times) == 1


def test_the_client_retries_after_retry_after_by_default(refusing):
    srv = refusing(1)
    with Client(srv.url, api_key="", deadline=20) as zv:
        r = zv.verify([ITEM])
    assert r.valid == 1 and len(srv.times) == 2
    assert srv.times[1] - srv.times[0] >= 0.9  # waited the server's Retry-After
    assert srv.headers[0]["x-zapverify-deadline"] == "20"  # the deadline goes with every try


def test_zap_refusals_carry_retry_after_and_are_retried(refusing):
    srv = refusing(1)
    pks, msgs, sigs = [b"\0" * 32], [b"m"], [b"\0" * 64]
    with Client(srv.url, retry=None, api_key="") as zv:
        with pytest.raises(RemoteError) as exc:
            zv.verify_batch("ed25519", pks, msgs, sigs)
    assert exc.value.code == "OVERLOADED" and exc.value.retry_after == 1.0
    srv = refusing(1)
    with Client(srv.url, api_key="") as zv:
        assert zv.verify_batch("ed25519", pks, msgs, sigs).valid == 1
    assert srv.times[1] - srv.times[0] >= 0.9


def test_retries_stop_at_the_attempts_budget_and_deadline(refusing):
    srv = refusing(10)
    t0 = time.monotonic()
    with Client(srv.url, api_key="", retry=Retry(attempts=2, base=0.01)) as zv:
        with pytest.raises(RemoteError) as exc:
            zv.verify([ITEM])
    assert len(srv.times) == 3 and exc.value.retry_after == 1.0  # 1 try + 2 retries
    assert time.monotonic() - t0 >= 1.8
    srv = refusing(10)
    with Client(srv.url, api_key="", deadline=1.5) as zv:  # a second wait would pass the deadline
        with pytest.raises(RemoteError):
            zv.verify([ITEM])
    assert len(srv.times) == 2
    srv = refusing(10)
    with Client(srv.url, api_key="", retry=Retry(budget=0.5)) as zv:  # not even one 1 s wait
        with pytest.raises(RemoteError):
            zv.verify([ITEM])
    assert len(srv.times) == 1


def test_the_async_client_backs_off_too(refusing):
    srv = refusing(1)

    async def go():
        async with AsyncClient(srv.url, api_key="") as zv:
            return await zv.verify([ITEM])
    assert asyncio.run(go()).valid == 1
    assert srv.times[1] - srv.times[0] >= 0.9


def test_backoff_grows_capped_with_jitter():
    r = Retry(attempts=10, base=1.0, cap=8.0, budget=1000)
    waits = [r.wait(n, None, 0.0, 1e9) for n in range(6)]
    assert all(w is not None for w in waits)
    assert 0.5 <= waits[0] <= 1.0 and 4.0 <= waits[5] <= 8.0  # 1·2⁵ capped at 8, jittered
    assert r.wait(0, 3.0, 0.0, 1e9) >= 3.0  # never sooner than the server asked
    assert r.wait(10, None, 0.0, 1e9) is None


def test_bench_honours_retry_after_and_counts_the_requests_in_flight_at_the_end(refusing):
    from zapverify import loadgen
    from zapverify.loadgen import BenchConfig

    items = loadgen.make_items("ed25519", 1, 1)
    srv = refusing(0, refuse={2, 3})  # the first (connect) request passes; the next two are refused
    cfg = BenchConfig(url=srv.url, batch=1, duration=3.0, concurrency=1, unique=1, deadline=15)
    r = asyncio.run(loadgen.run(cfg, items))
    assert r.errors == r.refused == 2 and r.requests >= 1
    assert srv.times[2] - srv.times[1] >= 0.9  # waited the Retry-After, did not resend at once
    assert srv.headers[1]["x-zapverify-deadline"] == "15"
    assert "refused 503 OVERLOADED" in loadgen.format_report(r)
    # Answers that take 1.5 s, a 1 s window: the two in flight at its end are waited for and counted.
    srv = refusing(0, delay=1.5)
    cfg = BenchConfig(url=srv.url, batch=1, duration=2.0, concurrency=2, unique=1)
    r = asyncio.run(loadgen.run(cfg, items))
    assert r.in_flight_at_end == 2 and r.cut == 0 and r.requests == 2 and r.errors == 0
    assert r.seconds >= 1.4
