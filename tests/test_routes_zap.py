"""POST /v1/verify/zap (app/api/routes/zap.py): frames built by hand from docs/wire-format.md,
error frames with 4xx statuses, and hypothesis fuzzing through the ASGI app (never a 5xx)."""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from app.config import Settings
from app.core.errors import by_wire_code
from app.engine.reference import kat
from app.engine.runtime import PoolConfig, Runtime
from app.engine.verify.engine import Engine, EngineConfig
from app.main import create_app
from app.wire import zap

DOC = Path(__file__).resolve().parent.parent / "docs" / "wire-format.md"
ZAP = {"content-type": "application/x-zap"}

# RFC 8032 §7.1 TEST 1 and TEST 2 (Ed25519).
RFC1 = (bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"), b"",
        bytes.fromhex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd"
                      "25bf5f0595bbe24655141438e7a100b"))
RFC2 = (bytes.fromhex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"), b"\x72",
        bytes.fromhex("92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8"
                      "c387b2eaeb4302aeeb00d291612bb0c00"))


def zeros_to_8(n: int) -> bytes:
    return bytes(-n % 8)


def hand_frame(scheme: int, items: list[tuple[bytes, bytes, bytes]], *, options: int = 0, ctx: bytes = b"",
               request_id: int = 0) -> bytes:
    """A verify request frame written from docs/wire-format.md sections 2 and 3, byte by byte."""
    pk_len, sig_len = len(items[0][0]), len(items[0][2])
    body = bytearray()
    body += bytes([scheme, options, len(ctx), 0])
    body += len(items).to_bytes(4, "little") + pk_len.to_bytes(4, "little") + sig_len.to_bytes(4, "little")
    body += ctx + zeros_to_8(len(ctx))
    pks = b"".join(pk for pk, _, _ in items)
    body += pks + zeros_to_8(len(pks))
    sigs = b"".join(sig for _, _, sig in items)
    body += sigs + zeros_to_8(len(sigs))
    offsets = bytearray((0).to_bytes(4, "little"))
    end = 0
    for _, msg, _ in items:
        end += len(msg)
        offsets += end.to_bytes(4, "little")
    body += offsets + zeros_to_8(len(offsets))
    msgs = b"".join(msg for _, msg, _ in items)
    body += msgs + zeros_to_8(len(msgs))
    size = 16 + len(body)
    header = b"ZAP\x00" + (1).to_bytes(2, "little") + bytes([0x01, 0]) + request_id.to_bytes(4, "little") \
        + size.to_bytes(4, "little")
    return header + bytes(body)


def parse_response(frame: bytes) -> tuple[int, int, int, bytes, list[int]]:
    """(request_id, count, valid, merkle_root, verdicts) read by hand (docs section 4)."""
    assert frame[:4] == b"ZAP\x00" and frame[6] == 0x02
    request_id, size = struct.unpack_from("<II", frame, 8)
    assert size == len(frame) and size % 8 == 0
    count, valid = struct.unpack_from("<II", frame, 16)
    return request_id, count, valid, frame[24:56], list(frame[56:56 + count])


def parse_error(frame: bytes) -> tuple[int, int, str]:
    assert frame[:4] == b"ZAP\x00" and frame[6] == 0x7F
    request_id = struct.unpack_from("<I", frame, 8)[0]
    code, _, msg_len = struct.unpack_from("<HHI", frame, 16)
    return request_id, code, frame[24:24 + msg_len].decode()


def rfc6962_root(leaves: list[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH, written recursively (app/engine/commit/merkle.py builds it bottom-up)."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + rfc6962_root(leaves[:k]) + rfc6962_root(leaves[k:])).digest()


def expected_root(code: int, items, verdicts) -> bytes:
    h = lambda b: hashlib.sha256(b).digest()  # noqa: E731
    return rfc6962_root([h(b"\x00" + bytes([code, int(v)]) + h(pk) + h(msg) + h(sig))
                         for (pk, msg, sig), v in zip(items, verdicts)])


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(Settings(), runtime=Runtime(engine))) as c:
        yield c


def _post(client, frame: bytes, headers=ZAP):
    return client.post("/v1/verify/zap", content=frame, headers=headers)


# ------------------------------------------------------------------ hand-built frames
def test_hand_built_ed25519_frame(client):
    bad = (RFC2[0], RFC2[1], RFC2[2][:10] + bytes([RFC2[2][10] ^ 1]) + RFC2[2][11:])
    items = [RFC1, RFC2, bad, (RFC1[0], b"", bytes(64))]
    r = _post(client, hand_frame(0x01, items, request_id=0xC0FFEE))
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-zap"
    rid, count, valid, root, verdicts = parse_response(r.content)
    assert (rid, count, valid, verdicts) == (0xC0FFEE, 4, 2, [1, 1, 0, 0])
    assert root == expected_root(0x01, items, [1, 1, 0, 0])


def test_hand_built_frame_is_the_documented_example():
    block = DOC.read_text().split("## 9. Example", 1)[1].split("```")[1]
    doc_bytes = bytes.fromhex("".join(re.sub(r"^[0-9a-f]{4}: ", "", line)[:47] for line in block.strip().splitlines()))
    assert doc_bytes == hand_frame(0x01, [RFC1, RFC2], request_id=42)


def test_hand_built_secp256k1_uncompressed_prehashed(client):
    signed = kat.sign_items("secp256k1", 3, seed=5, compressed=False, prehashed=True)
    items = [(i.public_key, i.message, i.signature) for i in signed]
    items.append((items[0][0], hashlib.sha256(b"other").digest(), items[0][2]))
    assert len(items[0][0]) == 65
    r = _post(client, hand_frame(0x02, items, options=0x01, request_id=7))
    rid, count, valid, root, verdicts = parse_response(r.content)
    assert (rid, count, valid, verdicts) == (7, 4, 3, [1, 1, 1, 0])
    assert root == expected_root(0x02, items, verdicts)
    # Without the prehashed bit the 32-byte messages are hashed again: no signature holds.
    r = _post(client, hand_frame(0x02, items, options=0, request_id=8))
    assert parse_response(r.content)[4] == [0, 0, 0, 0]


def test_hand_built_ml_dsa_with_context(client):
    ctx = b"zap-ctx"  # 7 bytes: one byte of padding
    signed = kat.sign_items("ml-dsa-44", 2, seed=3, context=ctx)
    items = [(i.public_key, i.message, i.signature) for i in signed]
    r = _post(client, hand_frame(0x10, items, ctx=ctx, request_id=3))
    assert parse_response(r.content)[1:3] == (2, 2)
    r = _post(client, hand_frame(0x10, items, ctx=b"zap-ctY", request_id=4))
    assert parse_response(r.content)[4] == [0, 0]


def test_same_root_as_the_json_route(client):
    signed = kat.sign_items("ed25519", 5, seed=11)
    frame = hand_frame(0x01, [(i.public_key, i.message, i.signature) for i in signed])
    zr = parse_response(_post(client, frame).content)
    jr = client.post("/v1/verify", json={"items": [
        {"scheme": "ed25519", "public_key": i.public_key.hex(), "message": i.message.hex(),
         "signature": i.signature.hex()} for i in signed]}).json()
    assert zr[3].hex() == jr["merkle_root"] and zr[2] == jr["valid"] == 5


# ------------------------------------------------------------------ error frames
@pytest.mark.parametrize("mutate, status, name, echoed", [
    (lambda f: b"XAP\0" + f[4:], 400, "BAD_MAGIC", False),
    (lambda f: f[:-8], 400, "BAD_SIZE", True),
    (lambda f: f + bytes(8), 400, "BAD_SIZE", True),
    (lambda f: f[:16] + b"\x7e" + f[17:], 400, "UNKNOWN_SCHEME", True),
    (lambda f: f[:6] + b"\x02" + f[7:], 400, "BAD_TYPE", True),
    (lambda f: f[:20] + (0).to_bytes(4, "little") + f[24:], 400, "EMPTY_BATCH", True),
    (lambda f: b"", 400, "BAD_SIZE", False),
    # header-level errors are still addressed to the request (issue 15: they answered 0)
    (lambda f: f[:4] + b"\x02\x00" + f[6:], 400, "BAD_VERSION", True),
    (lambda f: f[:7] + b"\x80" + f[8:], 400, "BAD_RESERVED", True),
    (lambda f: f[:12] + (2**31).to_bytes(4, "little") + f[16:], 413, "FRAME_TOO_LARGE", True),
    (lambda f: f[:12] + (20).to_bytes(4, "little") + f[16:], 400, "BAD_SIZE", True),
])
def test_bad_frames_get_error_frames(client, mutate, status, name, echoed):
    r = _post(client, mutate(hand_frame(0x01, [RFC1, RFC2], request_id=99)))
    assert r.status_code == status and r.headers["content-type"] == "application/x-zap"
    rid, code, message = parse_error(r.content)
    assert by_wire_code(code).code == name and message.startswith(name)
    assert rid == (99 if echoed else 0)


def test_wrong_content_type_is_415(client):
    r = _post(client, hand_frame(0x01, [RFC1]), headers={"content-type": "application/octet-stream"})
    assert r.status_code == 415 and by_wire_code(parse_error(r.content)[1]).code == "BAD_CONTENT_TYPE"


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "application/problem+json"])
def test_json_posted_to_the_zap_route_is_refused_in_json(client, content_type):
    r = client.post("/v1/verify/zap", content=b'{"items": []}', headers={"content-type": content_type})
    assert r.status_code == 415 and r.headers["content-type"] == "application/json", r.headers
    err = r.json()["error"]
    assert err["code"] == "BAD_CONTENT_TYPE" and err["field"] == "content-type" and "/v1/verify" in err["message"]


def test_limits_are_413_error_frames(engine):
    s = Settings(zap_max_frame_bytes=256, zap_max_items=2, max_message_bytes=4)
    with TestClient(create_app(s, runtime=Runtime(engine))) as c:
        big = hand_frame(0x01, [RFC1, RFC2, RFC1])  # 3 items, 312 bytes
        r = _post(c, big)
        assert r.status_code == 413 and by_wire_code(parse_error(r.content)[1]).code == "FRAME_TOO_LARGE"
        r = _post(c, hand_frame(0x01, [RFC1, RFC2, RFC1], request_id=5)[:248])  # declared size still over
        assert r.status_code == 413
        r = c.post("/v1/verify/zap", content=iter([big[:100], big[100:]]), headers=ZAP)  # chunked, no length
        assert r.status_code == 413 and by_wire_code(parse_error(r.content)[1]).code == "FRAME_TOO_LARGE"
        r = _post(c, hand_frame(0x01, [(RFC1[0], b"12345", RFC1[2])]))
        assert r.status_code == 413 and by_wire_code(parse_error(r.content)[1]).code == "MESSAGE_LIMIT"
    s = Settings(zap_max_items=1)
    with TestClient(create_app(s, runtime=Runtime(engine))) as c:
        r = _post(c, hand_frame(0x01, [RFC1, RFC2], request_id=6))
        assert r.status_code == 413 and parse_error(r.content)[:2] == (6, 0x0012)


class _NeverReady(Engine):
    def start(self) -> None:  # stays not ready
        pass


def test_not_ready_is_503_error_frame():
    with TestClient(create_app(Settings(), runtime=Runtime(_NeverReady(EngineConfig(cpu_workers=1))))) as c:
        r = _post(c, hand_frame(0x01, [RFC1], request_id=12))
        assert r.status_code == 503 and parse_error(r.content)[:2] == (12, 0x0100)


# ------------------------------------------------------------------ fuzzing through the app
VALID = hand_frame(0x01, [RFC1, RFC2], request_id=1)
FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _check_reply(r) -> None:
    assert r.status_code < 500
    assert r.headers["content-type"] == "application/x-zap"
    frame = zap.decode(r.content)
    if r.status_code == 200:
        assert isinstance(frame, zap.Response)
    else:
        assert isinstance(frame, zap.ErrorFrame) and by_wire_code(frame.code).status == r.status_code


@given(data=st.binary(max_size=300))
@FUZZ
def test_fuzz_random_bodies(client, data):
    _check_reply(_post(client, data))
    _check_reply(_post(client, b"ZAP\0\x01\x00\x01\x00" + data))


@given(flips=st.lists(st.integers(0, len(VALID) * 8 - 1), min_size=1, max_size=4),
       cut=st.integers(0, len(VALID)), extra=st.binary(max_size=16))
@FUZZ
def test_fuzz_mutated_frames(client, flips, cut, extra):
    frame = bytearray(VALID)
    for bit in flips:
        frame[bit // 8] ^= 1 << (bit % 8)
    _check_reply(_post(client, bytes(frame)))
    _check_reply(_post(client, bytes(frame[:cut]) + extra))


@given(fields=st.tuples(*[st.integers(0, 2**32 - 1) | st.integers(0, 70) for _ in range(4)]),
       head=st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255)), tail=st.binary(max_size=200))
@FUZZ
def test_fuzz_hostile_headers(client, fields, head, tail):
    count, pk_len, sig_len, size = fields
    frame = struct.pack("<4sHBBII", b"ZAP\0", 1, 1, 0, 3, size) + struct.pack(
        "<BBBBIII", head[0], head[1], head[2], 0, count, pk_len, sig_len) + tail
    _check_reply(_post(client, frame))


# ------------------------------------------------------------------ pool slabs and receipts
def _pool_runtime(pool_bytes: int) -> Runtime:
    rt = Runtime.open(EngineConfig(backend="cpu", cpu_workers=1, cpu_parallelism="thread"),
                      PoolConfig(pool_bytes, source="heap", wait_seconds=0.1, debug=True))
    rt.engine.ready = True  # the session engine's self-test covers the CPU backend
    return rt


def test_frames_land_in_a_pool_slab_released_after_the_answer():
    eng = _pool_runtime(4 << 20)
    with TestClient(create_app(Settings(receipts=False), runtime=eng)) as c:
        frame = hand_frame(0x01, [RFC1, RFC2], request_id=77)
        for _ in range(3):
            r = _post(c, frame)
            assert parse_response(r.content)[:3] == (77, 2, 2)
        stats = eng.pool.stats()
        assert stats["acquired_total"] == 3 and stats["released_total"] == 3
        assert stats["in_use_bytes"] == 0 and stats["high_water_bytes"] >= len(frame)
        assert stats["misuse_total"] == 0
        # The pool is held by someone else: the frame waits, then gets a 503 error frame.
        hog = eng.pool.acquire(eng.pool.capacity_bytes, "ingest")
        try:
            r = _post(c, frame)
            assert r.status_code == 503 and parse_error(r.content)[:2] == (77, 0x0103)
        finally:
            hog.release()
        assert _post(c, frame).status_code == 200


def test_zap_answer_is_recorded_as_a_receipt(engine, tmp_path):
    items = [RFC1, RFC2, (RFC1[0], b"x", RFC1[2])]
    s = Settings(data_dir=tmp_path)
    with TestClient(create_app(s, runtime=Runtime(engine))) as c:
        r = _post(c, hand_frame(0x01, items, request_id=5))
        _, count, valid, root, verdicts = parse_response(r.content)
        receipt = c.get(f"/v1/receipts/{r.headers['x-zapverify-batch-id']}").json()
        assert (receipt["count"], receipt["valid"], receipt["merkle_root"]) == (3, 2, root.hex())
        assert receipt["schemes"] == ["ed25519"] and receipt["source"] == "http"
        proof = c.get(f"/v1/receipts/{r.headers['x-zapverify-batch-id']}/proof/2").json()
        assert proof["verdict"] is False and proof["merkle_root"] == root.hex()


def test_a_client_gone_mid_upload_is_counted_not_a_500(live_server):
    """A client that sends the header and part of the body, then closes: no 500 in /metrics,
    no traceback, the outcome counted as client_disconnected."""
    import socket

    frame = hand_frame(0x01, [RFC1, RFC2], request_id=5)
    host, port = live_server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/verify/zap HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-zap\r\n"
                     + f"Content-Length: {len(frame)}\r\n\r\n".encode() + frame[:40])
    import time

    import httpx

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ingest = httpx.get(live_server.url + "/v1/status").json()["stats"]["ingest"]
        if ingest.get("http", {}).get("client_disconnected"):
            break
        time.sleep(0.05)
    assert ingest["http"]["client_disconnected"] >= 1
    metrics = httpx.get(live_server.url + "/metrics").text
    assert not re.search(r'zapverify_http_requests_total\{[^}]*status="500"', metrics)
