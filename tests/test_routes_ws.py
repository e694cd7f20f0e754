"""WebSocket /v1/ws/verify (app/api/routes/ws.py): pipelining, replies matched by id, bad messages
mid-stream, and the in-flight bound that makes the server stop reading."""

from __future__ import annotations

import asyncio
import json
import random
import threading

import pytest
from starlette.testclient import TestClient

from app.config import Settings
from app.engine.reference import kat
from app.engine.runtime import PoolConfig, Runtime
from app.engine.verify.engine import Engine, EngineConfig
from app.main import create_app
from app.wire import zap


@pytest.fixture(scope="module")
def signed():
    good = kat.sign_items("ed25519", 2, seed=21)
    bad = kat.mutate(good[1], random.Random(1))
    return good[0], good[1], bad


def _frame(items, rid: int) -> bytes:
    return bytes(zap.encode_items("ed25519", [i.public_key for i in items], [i.message for i in items],
                                  [i.signature for i in items], request_id=rid))


def _json(items, rid) -> str:
    return json.dumps({"request_id": rid, "items": [
        {"scheme": i.scheme, "public_key": i.public_key.hex(), "message": i.message.hex(),
         "signature": i.signature.hex()} for i in items]})


def test_thousand_pipelined_requests_with_bad_messages_mid_stream(engine, signed):
    a, b, bad = signed
    app = create_app(Settings(ws_max_in_flight=16), runtime=Runtime(engine))
    expected: dict[tuple[str, object], list[bool]] = {}
    with TestClient(app) as client, client.websocket_connect("/v1/ws/verify") as ws:
        for i in range(1000):
            items = [a, bad] if i % 5 == 0 else [a, b]
            verdicts = [True, i % 5 != 0]
            if i % 3 == 0:
                ws.send_text(_json(items, f"j{i}"))
                expected[("json", f"j{i}")] = verdicts
            else:
                ws.send_bytes(_frame(items, i + 1))
                expected[("zap", i + 1)] = verdicts
            if i == 500:
                ws.send_bytes(_frame([a, b], 777_777)[:-8])  # truncated frame: BAD_SIZE, id still readable
                ws.send_bytes(b"GET / HTTP/1.1\r\nHost: zap\r\n\r\n")  # not a frame at all: id 0
                ws.send_text('{"request_id": "bad", "items": "nope"}')
                ws.send_text("{not json")
        got: dict[tuple[str, object], list[bool]] = {}
        errors = []
        roots = set()
        for _ in range(len(expected) + 4):
            msg = ws.receive()
            if msg.get("bytes") is not None:
                frame = zap.decode(msg["bytes"])
                if isinstance(frame, zap.ErrorFrame):
                    errors.append((frame.request_id, frame.name))
                    continue
                got[("zap", frame.request_id)] = frame.verdicts.astype(bool).tolist()
                if frame.valid == 2:
                    roots.add(frame.merkle_root.hex())
            else:
                body = json.loads(msg["text"])
                if "error" in body:
                    errors.append((body["request_id"], body["error"]["code"]))
                    continue
                got[("json", body["request_id"])] = body["verdicts"]
                if body["valid"] == 2:
                    roots.add(body["merkle_root"])
        assert got == expected
        assert sorted(errors, key=str) == sorted([(777_777, "BAD_SIZE"), (0, "BAD_MAGIC"), ("bad", "BAD_REQUEST"),
                                                  (None, "BAD_JSON")], key=str)
        assert len(roots) == 1  # the same two items give the same root over either encoding
        # The connection is still usable after the bad messages.
        ws.send_bytes(_frame([b], 4242))
        assert zap.decode(ws.receive_bytes()).request_id == 4242
        stats = app.state.ws_stats
        assert stats.in_flight_peak <= 16 and stats.messages_total == 1005 and stats.errors_total == 4


def test_json_errors_name_the_field(engine, signed):
    with TestClient(create_app(Settings(), runtime=Runtime(engine))) as client, \
            client.websocket_connect("/v1/ws/verify") as ws:
        ws.send_text(json.dumps({"items": []}))
        body = json.loads(ws.receive_text())
        assert body["request_id"] is None and body["error"]["field"] == "request_id"
        ws.send_text(json.dumps({"request_id": 5, "items": [{"scheme": "nope", "public_key": "", "message": "",
                                                              "signature": ""}]}))
        body = json.loads(ws.receive_text())
        assert body == {"request_id": 5, "error": {"code": "UNKNOWN_SCHEME", "field": "items[0].scheme",
                                                   "message": body["error"]["message"]}}
        ws.send_text(json.dumps({"request_id": -1, "items": []}))
        assert json.loads(ws.receive_text())["request_id"] is None


# ------------------------------------------------------------------ the in-flight bound, driven as raw ASGI
class _GatedEngine(Engine):
    """A ready engine whose verify waits for ``gate``: a slow backend, under the test's control."""

    def __init__(self, gate: threading.Event):
        super().__init__(EngineConfig(backend="cpu", cpu_workers=1))
        self.gate = gate
        self.ready = True

    def verify(self, batch):
        self.gate.wait(60)
        return super().verify(batch)


async def _drive(app, frame: bytes, *, total: int, peer_reads: bool, release=None) -> tuple[int, list, object]:
    """Run the WebSocket route with a peer that has ``total`` requests ready to send at once.

    ``peer_reads=False`` models a client that never reads: its ``send`` never returns, as
    a server's does when the peer's TCP window is full.  Returns (requests the server
    read, replies it sent, stats) once nothing moves any more.
    """
    stats = app.state.ws_stats
    pulled = 0
    replies: list = []
    connected = False
    forever = asyncio.Event()
    finished = asyncio.Event()

    async def receive():
        nonlocal pulled, connected
        if not connected:
            connected = True
            return {"type": "websocket.connect"}
        if pulled < total:
            pulled += 1
            return {"type": "websocket.receive", "bytes": frame}
        await finished.wait()
        return {"type": "websocket.disconnect", "code": 1000}

    async def send(message):
        if message["type"] == "websocket.send":
            if not peer_reads:
                await forever.wait()
            replies.append(message)
            if len(replies) == total:
                finished.set()

    scope = {"type": "websocket", "path": "/v1/ws/verify", "raw_path": b"/v1/ws/verify", "query_string": b"",
             "headers": [], "scheme": "ws", "server": ("test", 80), "client": ("peer", 1), "root_path": "",
             "subprotocols": [], "asgi": {"version": "3.0"}}
    task = asyncio.create_task(app(scope, receive, send))

    async def settle() -> None:
        last = None
        for _ in range(400):  # until the counters stop moving (at most ~20 s on a busy machine)
            await asyncio.sleep(0.05)
            now = (pulled, len(replies), stats.in_flight)
            if now == last:
                return
            last = now

    await settle()
    snapshot = (pulled, list(replies))
    if release is not None:
        release()
        await asyncio.wait_for(task, timeout=60)
    else:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return snapshot[0], snapshot[1], stats


def test_a_peer_that_never_reads_holds_the_server_at_the_bound(engine, signed):
    bound = 4
    app = create_app(Settings(ws_max_in_flight=bound), runtime=Runtime(engine))
    app.state.runtime = Runtime(engine)
    pulled, replies, stats = asyncio.run(_drive(app, _frame([signed[0]], 1), total=10_000, peer_reads=False))
    # The server read `bound` requests, verified them, blocked sending, and read no more.
    assert pulled == bound
    assert stats.in_flight_peak == bound
    assert replies == []


def test_a_slow_engine_stops_the_reader_then_drains(signed):
    bound = 3
    gate = threading.Event()
    eng = _GatedEngine(gate)
    app = create_app(Settings(ws_max_in_flight=bound), runtime=Runtime(eng))
    app.state.runtime = Runtime(eng)
    try:
        pulled, replies, stats = asyncio.run(_drive(app, _frame([signed[0]], 9), total=40, peer_reads=True,
                                                    release=gate.set))
    finally:
        gate.set()
        eng.close()
    assert pulled == bound and replies == []  # stalled at the bound while the engine was held
    assert stats.in_flight_peak == bound
    assert stats.messages_total == 40 and stats.in_flight == 0  # then every request got its reply


def test_ws_answers_are_recorded_as_receipts(engine, signed, tmp_path):
    a, b, bad = signed
    with TestClient(create_app(Settings(data_dir=tmp_path), runtime=Runtime(engine))) as client, \
            client.websocket_connect("/v1/ws/verify") as ws:
        ws.send_text(_json([a, bad], 1))
        body = json.loads(ws.receive_text())
        receipt = client.get(f"/v1/receipts/{body['batch_id']}").json()
        assert (receipt["count"], receipt["valid"], receipt["source"]) == (2, 1, "ws")
        assert receipt["merkle_root"] == body["merkle_root"]
        ws.send_bytes(_frame([a, b], 2))
        frame = zap.decode(ws.receive_bytes())
        page = client.get("/v1/receipts?limit=10").json()["receipts"]
        assert [(r["source"], r["merkle_root"]) for r in page] == [
            ("ws", body["merkle_root"]), ("ws", frame.merkle_root.hex())]


def test_ws_frames_land_in_the_pool(signed):
    rt = Runtime.open(EngineConfig(backend="cpu", cpu_workers=1, cpu_parallelism="thread"),
                      PoolConfig(4 << 20, source="heap", debug=True))
    rt.engine.ready = True
    with TestClient(create_app(Settings(receipts=False), runtime=rt)) as client, \
            client.websocket_connect("/v1/ws/verify") as ws:
        for rid in range(1, 6):
            ws.send_bytes(_frame([signed[0], signed[1]], rid))
        assert sorted(zap.decode(ws.receive_bytes()).request_id for _ in range(5)) == [1, 2, 3, 4, 5]
        stats = rt.pool.stats()
        assert stats["acquired_total"] == stats["released_total"] == 5 and stats["in_use_bytes"] == 0
