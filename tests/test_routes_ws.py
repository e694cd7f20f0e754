"""WebSocket /v1/ws/verify (app/api/routes/ws.py): pipelining, replies matched by id, bad messages
mid-stream, and the in-flight bound that makes the server stop reading."""

from __future__ import annotations

import asyncio
import json
import random
import threading

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.api.routes import ws as ws_route
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
                ws.send_text('{"request_id": "nj", "items": [}')  # not JSON, but its id comes first
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
                                                  ("nj", "BAD_JSON")], key=str)
        assert len(roots) == 1  # the same two items give the same root over either encoding
        # The connection is still usable after the bad messages.
        ws.send_bytes(_frame([b], 4242))
        assert zap.decode(ws.receive_bytes()).request_id == 4242
        stats = app.state.runtime.ws
        assert stats.in_flight_peak <= 16 and stats.messages_total == 1005 and stats.errors_total == 4


def test_json_errors_name_the_field(engine, signed):
    with TestClient(create_app(Settings(), runtime=Runtime(engine))) as client, \
            client.websocket_connect("/v1/ws/verify") as ws:
        ws.send_text(json.dumps({"request_id": 5, "items": [{"scheme": "nope", "public_key": "", "message": "",
                                                              "signature": ""}]}))
        body = json.loads(ws.receive_text())
        assert body == {"request_id": 5, "error": {"code": "UNKNOWN_SCHEME", "field": "items[0].scheme",
                                                   "message": body["error"]["message"]}}


@pytest.mark.parametrize("message", [json.dumps({"items": []}), json.dumps({"request_id": -1, "items": []}),
                                     json.dumps([1, 2])], ids=["no-id", "negative-id", "not-an-object"])
def test_a_message_without_a_readable_id_closes_the_socket_with_1008(engine, signed, message):
    # An error reply that names no request cannot be matched by the client: the socket is
    # closed instead, after the replies of the requests in flight, its reason naming the field.
    a, b, _ = signed
    with TestClient(create_app(Settings(), runtime=Runtime(engine))) as client, \
            client.websocket_connect("/v1/ws/verify") as ws:
        ws.send_text(_json([a, b], "first"))
        ws.send_text(message)
        assert json.loads(ws.receive_text())["request_id"] == "first"
        with pytest.raises(WebSocketDisconnect) as info:
            ws.receive_text()
        assert info.value.code == 1008 and "request_id" in info.value.reason


# ------------------------------------------------------------------ the in-flight bound, driven as raw ASGI
class _GatedEngine(Engine):
    """A ready engine whose verify waits for ``gate``: a slow backend, under the test's control."""

    def __init__(self, gate: threading.Event):
        super().__init__(EngineConfig(backend="cpu", cpu_workers=1))
        self.gate = gate
        self.ready = True

    def run(self, work):
        self.gate.wait(60)
        return super().run(work)


async def _drive(app, frame: bytes, *, total: int, peer_reads: bool, release=None) -> tuple[int, list, object]:
    """Run the WebSocket route with a peer that has ``total`` requests ready to send at once.

    ``peer_reads=False`` models a client that never reads: its ``send`` never returns, as
    a server's does when the peer's TCP window is full.  Returns (requests the server
    read, replies it sent, stats) once nothing moves any more.
    """
    stats = app.state.runtime.ws
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


# ------------------------------------------------------------------ unreadable, oversized and refused text messages
async def _converse(app, texts: list[str], *, replies: int, timeout: float = 15.0) -> tuple[list[dict], dict | None]:
    """Send ``texts`` on the WebSocket route, driven as raw ASGI; collect the replies until
    ``replies`` have come or the server closed the socket (or ``timeout``: an old server that
    never answered).  Returns (the JSON replies, the close message or None)."""
    queue: list[dict] = [{"type": "websocket.connect"}] + [{"type": "websocket.receive", "text": t} for t in texts]
    done = asyncio.Event()
    got: list[dict] = []
    closed: dict | None = None

    async def receive():
        if queue:
            return queue.pop(0)
        await done.wait()
        return {"type": "websocket.disconnect", "code": 1000}

    async def send(message):
        nonlocal closed
        if message["type"] == "websocket.send":
            got.append(json.loads(message["text"]))
        elif message["type"] == "websocket.close":
            closed = message
        if closed is not None or len(got) >= replies:
            done.set()

    scope = {"type": "websocket", "path": "/v1/ws/verify", "raw_path": b"/v1/ws/verify", "query_string": b"",
             "headers": [], "scheme": "ws", "server": ("test", 80), "client": ("peer", 1), "root_path": "",
             "subprotocols": [], "asgi": {"version": "3.0"}}
    task = asyncio.create_task(app(scope, receive, send))
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        pass
    done.set()
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 30)
    return got, closed


def _app(engine, **settings):
    app = create_app(Settings(receipts=False, **settings), runtime=Runtime(engine))
    return app


NESTED = "[" * 100_000 + "]" * 100_000  # past the parser's depth: RecursionError, not ValueError


def test_deeply_nested_json_is_answered_with_its_request_id(engine, signed):
    a, b, _ = signed
    nested = '{"request_id": 9, "items": ' + NESTED + "}"
    got, closed = asyncio.run(_converse(_app(engine), [nested, _json([a, b], "after")], replies=2))
    assert closed is None
    by_id = {r["request_id"]: r for r in got}
    assert by_id[9]["error"]["code"] == "BAD_JSON" and by_id[9]["error"]["field"] == "body"
    assert by_id["after"]["verdicts"] == [True, True]  # the connection went on


def test_deeply_nested_json_without_a_readable_id_closes_with_1007(engine):
    got, closed = asyncio.run(_converse(_app(engine), [NESTED], replies=1))
    assert got == [] and closed is not None
    assert closed["code"] == 1007 and closed["reason"].startswith("BAD_JSON")


def test_small_broken_json_is_named_only_by_a_first_key_request_id(engine, signed):
    a, b, _ = signed
    # Well under the 64 KiB full parse, but broken: the parse finds no id, so the first key must.
    first = '{"request_id": 7, "items": [1,}'
    got, closed = asyncio.run(_converse(_app(engine), [first, _json([a, b], "after")], replies=2))
    assert closed is None and {r["request_id"] for r in got} == {7, "after"}
    last = '{"items": [1,], "request_id": 7}'
    got, closed = asyncio.run(_converse(_app(engine), [last], replies=1))
    assert got == [] and closed["code"] == 1007 and closed["reason"].startswith("BAD_JSON")


def test_a_text_message_over_the_json_body_limit_is_refused_before_it_is_parsed(engine, signed, monkeypatch):
    a, b, _ = signed
    big = _json([a, b] * 4, "big")  # ~2.4 kB, over a 1 KiB limit
    assert big.startswith('{"request_id": "big"') and len(big) > 1024
    id_last = json.dumps({"items": json.loads(big)["items"], "request_id": "last"})
    parsed: list[int] = []
    real_parse = ws_route._parse
    monkeypatch.setattr(ws_route, "_parse", lambda text: parsed.append(len(text)) or real_parse(text))
    got, closed = asyncio.run(_converse(_app(engine, max_body_bytes=1024), [big], replies=1))
    assert closed is None and got[0]["request_id"] == "big"
    assert got[0]["error"]["code"] == "LIMIT_EXCEEDED" and got[0]["error"]["field"] == "body"
    # Its id is not the first key and it is too big to parse for it: closed with 1009.
    got, closed = asyncio.run(_converse(_app(engine, max_body_bytes=1024), [id_last], replies=1))
    assert got == [] and closed is not None and closed["code"] == 1009
    assert parsed == []


def test_text_messages_are_charged_to_admission_before_they_are_parsed(engine, signed):
    a, b, _ = signed
    app = _app(engine, admission_max_bytes=4096)
    held = app.state.runtime.admission.admit(nbytes=10_000)  # another request holds the whole bound
    try:
        # Refused before it is parsed or validated: OVERLOADED, not the BAD_REQUEST of its items.
        got, closed = asyncio.run(_converse(app, ['{"request_id": 3, "items": "nope"}', _json([a, b], 4)],
                                            replies=2))
    finally:
        held.release()
    assert closed is None
    errors = {r["request_id"]: r["error"] for r in got}
    assert set(errors) == {3, 4} and {e["code"] for e in errors.values()} == {"OVERLOADED"}
    assert all(e["retry_after"] > 0 for e in errors.values())
    assert app.state.runtime.admission.snapshot()["refused_total"] == 2
    got, _ = asyncio.run(_converse(app, [_json([a, b], 5)], replies=1))  # the bound free again: served
    assert got[0]["verdicts"] == [True, True]
    snap = app.state.runtime.admission.snapshot()
    assert snap["bytes_in_flight"] == 0 and snap["requests_in_flight"] == 0


def test_peek_request_id_reads_a_leading_id_without_parsing_the_rest():
    assert ws_route.peek_request_id('{"request_id": 7, "items": [}') == 7
    assert ws_route.peek_request_id(' { "request_id" : "x", ' + "[" * 10) == "x"
    assert ws_route.peek_request_id('{"items": [], "request_id": 8}') == 8  # small: parsed whole
    assert ws_route.peek_request_id('{"items": [], "request_id": 8}', parse_up_to=10) is None
    assert ws_route.peek_request_id('{"request_id": -1}') is None
    assert ws_route.peek_request_id('{"request_id": ' + NESTED + "}") is None
