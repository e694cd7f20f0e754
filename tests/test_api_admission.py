"""Load shedding and slow clients (app/api/admission.py, app/api/slowbody.py, app/api/landing.py;
docs/operations.md, "Load shedding"): a request beyond the admission bound is refused at once
with 503 OVERLOADED + Retry-After, a ZAP header alone cannot reserve the size it declares, a
stalled body is cut with 408, pool exhaustion carries Retry-After."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest
from starlette.testclient import TestClient

from app.api.admission import Admission, AdmissionControl
from app.api.service import zap_error_response
from app.config import Settings
from app.core.batch import Batch
from app.core.errors import Overloaded, PoolExhausted
from app.core.schemes import SCHEMES
from app.engine.reference import kat
from app.engine.runtime import PoolConfig, Runtime
from app.engine.verify.engine import EngineConfig
from app.main import create_app
from app.wire import zap
from tests.server import LiveServer

ZAP = {"content-type": "application/x-zap"}


def _json_body(n: int) -> dict:
    return {"encoding": "hex", "items": [
        {"scheme": "ed25519", "public_key": i.public_key.hex(), "message": i.message.hex(),
         "signature": i.signature.hex()} for i in kat.sign_items("ed25519", n, seed=1)]}


def _frame(n: int, request_id: int = 5) -> bytes:
    signed = kat.sign_items("ed25519", n, seed=2)
    batch = Batch.from_items(SCHEMES["ed25519"], [i.public_key for i in signed], [i.message for i in signed],
                             [i.signature for i in signed])
    return bytes(zap.encode_request(batch, request_id))


def _error_code(frame: bytes) -> tuple[int, int]:
    assert frame[:4] == b"ZAP\x00" and frame[6] == 0x7F
    return struct.unpack_from("<I", frame, 8)[0], struct.unpack_from("<H", frame, 16)[0]


@pytest.fixture(scope="module")
def app(engine):
    return create_app(Settings(receipts=False, admission_max_items=8, admission_max_bytes=1 << 20,
                               admission_retry_after_seconds=2.5), runtime=Runtime(engine))


@pytest.fixture(scope="module")
def client(app):
    with TestClient(app) as c:
        yield c


def test_overloaded_is_a_5xx_with_its_own_wire_code():
    assert (Overloaded.status, Overloaded.wire_code, Overloaded.code) == (503, 0x0105, "OVERLOADED")


def test_bytes_bound_refuses_json_and_zap_with_retry_after(app, client):
    held = app.state.runtime.admission.admit(nbytes=1 << 20)  # the bound is full
    try:
        r = client.post("/v1/verify", json=_json_body(1))
        assert r.status_code == 503 and r.json()["error"]["code"] == "OVERLOADED"
        assert r.headers["retry-after"] == "3"  # 2.5 s, rounded up to whole seconds
        r = client.post("/v1/verify/zap", content=_frame(1, request_id=77), headers=ZAP)
        assert r.status_code == 503 and r.headers["retry-after"] == "3"
        assert _error_code(r.content) == (0, 0x0105)  # refused before the header was read
    finally:
        held.release()
    assert client.post("/v1/verify", json=_json_body(1)).status_code == 200
    snap = client.get("/v1/status").json()["admission"]
    assert snap["items_in_flight"] == snap["bytes_in_flight"] == snap["requests_in_flight"] == 0
    assert snap["refused_total"] >= 2 and snap["max_bytes"] == 1 << 20


def test_items_bound_counts_the_items_of_json_and_zap(app, client):
    held = app.state.runtime.admission.admit(items=6)
    try:
        assert client.post("/v1/verify", json=_json_body(3)).status_code == 503  # 6 + 3 > 8
        r = client.post("/v1/verify/zap", content=_frame(3, request_id=9), headers=ZAP)
        assert r.status_code == 503 and _error_code(r.content) == (9, 0x0105)  # the header was in: its id
        r = client.post("/v1/verify", json=_json_body(2))  # 6 + 2 = 8: within the bound
        assert r.status_code == 200 and r.json()["verdicts"] == [True, True]
    finally:
        held.release()


def test_a_lone_request_is_admitted_over_the_bound(client):
    r = client.post("/v1/verify", json=_json_body(9))  # 9 items > 8, but nothing else in flight
    assert r.status_code == 200 and r.json()["valid"] == 9


def test_websocket_request_over_the_bound_gets_an_overloaded_frame(app, client):
    held = app.state.runtime.admission.admit(nbytes=1 << 20)
    try:
        with client.websocket_connect("/v1/ws/verify") as ws:
            ws.send_bytes(_frame(1, request_id=31))
            assert _error_code(ws.receive_bytes()) == (31, 0x0105)
            ws.send_text('{"request_id": 4, "encoding": "hex", "items": []}')
            assert '"OVERLOADED"' in ws.receive_text()
    finally:
        held.release()


def test_refusal_does_not_read_the_body():
    calls = []

    async def app(scope, receive, send):
        raise AssertionError("the app must not run")

    async def receive():
        calls.append("receive")
        return {"type": "http.request", "body": b"x", "more_body": False}

    sent = []

    async def send(msg):
        sent.append(msg)

    admission = Admission(max_items=10, max_bytes=100)
    held = admission.admit(nbytes=100)
    scope = {"type": "http", "method": "POST", "path": "/v1/verify", "headers": [(b"content-length", b"50")]}
    asyncio.run(AdmissionControl(app, admission)(scope, receive, send))
    held.release()
    assert calls == [] and sent[0]["status"] == 503
    assert (b"retry-after", b"1") in sent[0]["headers"]


def test_pool_exhausted_carries_retry_after():
    r = zap_error_response(PoolExhausted("no room", field="pool"), 12)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"


# ------------------------------------------------------------------ slow and hostile bodies, a real server
def _raw_request(port: int, path: str, headers: dict[str, str], body: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    s.sendall(head.encode() + b"\r\n" + body)
    return s


def _status(s: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        part = s.recv(65536)
        if not part:
            break
        data += part
    return int(data.split(b" ", 2)[1]), data


def _header(size: int, request_id: int = 3) -> bytes:
    return b"ZAP\x00" + (1).to_bytes(2, "little") + bytes([0x01, 0]) + struct.pack("<II", request_id, size)


@pytest.fixture
def pooled():
    """An engine with a 128 MiB heap pool (the session engine has none); the app closes it."""
    rt = Runtime.open(EngineConfig(backend="cpu"), PoolConfig(128 << 20, source="heap", wait_seconds=0.2))
    rt.engine.start()
    yield rt
    rt.close()


def test_a_zap_header_reserves_only_a_step_of_pool_memory(pooled):
    """The header of a 64 MiB frame, then nothing: the pool holds one step (1 MiB), not 64 MiB."""
    runtime = pooled
    assert runtime.pool is not None
    size = 64 << 20
    app = create_app(Settings(receipts=False, body_read_timeout_seconds=30), runtime=runtime)
    with LiveServer(app) as srv:
        before = runtime.pool.stats()["in_use_bytes"]
        s = _raw_request(srv.port, "/v1/verify/zap", {**ZAP, "Content-Length": str(size)}, _header(size) + bytes(4096))
        deadline = time.monotonic() + 10
        while runtime.pool.stats()["in_use_bytes"] == before and time.monotonic() < deadline:
            time.sleep(0.02)
        held = runtime.pool.stats()["in_use_bytes"] - before
        assert 0 < held <= 1 << 20
        s.close()  # the client goes away: the memory comes back
        deadline = time.monotonic() + 10
        while runtime.pool.stats()["in_use_bytes"] != before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert runtime.pool.stats()["in_use_bytes"] == before


def test_a_zap_body_that_arrives_in_pieces_grows_its_buffer_and_verifies(pooled):
    runtime = pooled
    frame = _frame(400, request_id=8)  # about 40 KiB: several doublings from a 4 KiB step
    app = create_app(Settings(receipts=False, zap_reserve_step_bytes=4096), runtime=runtime)
    with LiveServer(app) as srv:
        s = _raw_request(srv.port, "/v1/verify/zap", {**ZAP, "Content-Length": str(len(frame))}, b"")
        for lo in range(0, len(frame), 3000):
            s.sendall(frame[lo:lo + 3000])
            time.sleep(0.001)
        status, data = _status(s)
        s.close()
    assert status == 200, data[:300]
    assert runtime.pool.stats()["in_use_bytes"] == 0


@pytest.mark.parametrize("path,headers", [("/v1/verify/zap", ZAP),
                                          ("/v1/verify", {"content-type": "application/json"})])
def test_a_stalled_body_is_cut_with_408(engine, path, headers):
    app = create_app(Settings(receipts=False, body_read_timeout_seconds=0.5), runtime=Runtime(engine))
    with LiveServer(app) as srv:
        t0 = time.monotonic()
        first = _header(4096) if headers is ZAP else b'{"items": ['
        s = _raw_request(srv.port, path, {**headers, "Content-Length": "4096"}, first)
        status, data = _status(s)
        s.close()
    assert status == 408 and time.monotonic() - t0 < 5
    assert b"connection: close" in data.lower()
    assert app.state.runtime.admission.snapshot()["requests_in_flight"] == 0


def test_a_body_slower_than_the_minimum_rate_is_cut(engine):
    app = create_app(Settings(receipts=False, body_read_timeout_seconds=0.3, body_min_bytes_per_second=4096),
                     runtime=Runtime(engine))
    with LiveServer(app) as srv:
        s = _raw_request(srv.port, "/v1/verify/zap", {**ZAP, "Content-Length": str(1 << 20)}, _header(1 << 20))
        t0 = time.monotonic()
        status = None
        try:
            for _ in range(100):  # 100 bytes every 0.1 s: 1 kB/s, never a gap of 0.3 s
                s.sendall(bytes(100))
                time.sleep(0.1)
        except OSError:
            pass
        s.settimeout(5)
        status, _ = _status(s)
        s.close()
    assert status == 408 and time.monotonic() - t0 < 8


def test_ingest_tcp_frame_over_the_bound_gets_an_overloaded_frame(pooled):
    from app.engine.admission import Admission
    from app.engine.ingest import Ingest, IngestConfig

    admission = Admission(max_items=1 << 20, max_bytes=4096)
    ing = Ingest(pooled, IngestConfig(tcp_port=0, admission=admission, shutdown_seconds=5.0))
    ing.start()
    try:
        frame = _frame(2, request_id=41)

        def exchange() -> bytes:
            with socket.create_connection(("127.0.0.1", ing.ports["tcp"]), timeout=10) as s:
                s.sendall(frame)
                buf = b""
                while len(buf) < 16 or len(buf) < struct.unpack_from("<I", buf, 12)[0]:
                    buf += s.recv(65536)
                return buf

        held = admission.admit(nbytes=4096)
        try:
            assert _error_code(exchange()) == (41, 0x0105)
        finally:
            held.release()
        reply = exchange()
        assert reply[6] == 0x02 and struct.unpack_from("<I", reply, 8)[0] == 41  # verified once there is room
        deadline = time.monotonic() + 5
        while admission.snapshot()["requests_in_flight"] and time.monotonic() < deadline:
            time.sleep(0.01)
        snap = admission.snapshot()
        assert snap["requests_in_flight"] == snap["bytes_in_flight"] == 0 and snap["refused_total"] == 1
    finally:
        ing.stop()
