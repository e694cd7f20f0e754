"""zapverify/http.py against a real uvicorn server on loopback: JSON, ZAP, and the WebSocket stream."""

from __future__ import annotations

import asyncio
import random
import socket

import numpy as np
import pytest

from app.core.errors import ConnectionFailed, RemoteError, RequestError
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.wire import zap
from zapverify import AsyncClient, BatchRequest, Client, json_body


@pytest.fixture(scope="module")
def items():
    good = kat.sign_items("ed25519", 6, seed=31)
    return good, [good[0], kat.mutate(good[1], random.Random(2)), good[2]]


def _cols(items):
    return [i.public_key for i in items], [i.message for i in items], [i.signature for i in items]


def test_json_and_zap_agree(live_server, items):
    good, mixed = items
    with Client(live_server.url) as zv:
        j = zv.verify(mixed)
        z = zv.verify_batch("ed25519", *_cols(mixed))
    assert j.verdicts == [True, False, True] and (j.count, j.valid, j.invalid) == (3, 2, 1)
    assert z.verdicts.tolist() == [True, False, True] and (z.count, z.valid, z.invalid) == (3, 2, 1)
    assert j.merkle_root == z.merkle_root and len(z.merkle_root) == 32
    assert j.backends == {"ed25519": "cpu"}


def test_mixed_schemes_and_options_over_json_and_zap(live_server):
    k1 = kat.sign_items("secp256k1", 2, seed=4, compressed=False, prehashed=True)
    ml = kat.sign_items("ml-dsa-44", 2, seed=4, context=b"c")
    with Client(live_server.url) as zv:
        r = zv.verify(k1 + ml)
        assert r.verdicts == [True, True, True, True]
        z = zv.verify_batch("secp256k1", *_cols(k1), prehashed=True)
        assert z.valid == 2
        assert zv.verify_batch("secp256k1", *_cols(k1)).valid == 0  # digests hashed again
        assert zv.verify_batch("ml-dsa-44", *_cols(ml), ctx=b"c").valid == 2
        # uint8 arrays work as well as lists of bytes
        pks = np.frombuffer(b"".join(i.public_key for i in ml), np.uint8).reshape(2, -1)
        assert zv.verify_batch("ml-dsa-44", pks, [i.message for i in ml], [i.signature for i in ml],
                               ctx=b"c").valid == 2


def test_errors_are_typed(live_server, items):
    good, _ = items
    with Client(live_server.url) as zv:
        with pytest.raises(RemoteError) as info:
            zv.verify_frame(b"GARBAGE-NOT-A-FRAME-AT-ALL")
        assert (info.value.code, info.value.wire_code, info.value.status) == ("BAD_MAGIC", 0x0001, 400)
        with pytest.raises(RemoteError) as info:
            zv.verify([{"scheme": "nope", "public_key": b"", "message": b"", "signature": b""}])
        assert (info.value.code, info.value.status, info.value.field) == ("UNKNOWN_SCHEME", 422, "items[0].scheme")
        with pytest.raises(RequestError):  # keys of two lengths cannot share a frame
            zv.verify_batch("secp256k1", [bytes(33), bytes(65)], [b"", b""], [bytes(64)] * 2)
        with pytest.raises(RequestError):
            json_body([kat.Item("secp256k1", bytes(33), b"", bytes(64), prehashed=True),
                       kat.Item("secp256k1", bytes(33), b"", bytes(64))])


def test_unreachable_server_is_connection_failed():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with Client(f"http://127.0.0.1:{port}", timeout=5) as zv:
        with pytest.raises(ConnectionFailed):
            zv.verify_batch("ed25519", [bytes(32)], [b""], [bytes(64)])
        with pytest.raises(ConnectionFailed):
            list(zv.verify_stream([BatchRequest("ed25519", [bytes(32)], [b""], [bytes(64)])]))


def test_verify_stream_yields_in_order(live_server, items):
    good, _ = items
    # Request k carries k + 1 items, so the order of the results is visible in their counts.
    reqs = [BatchRequest("ed25519", *_cols([good[j % 6] for j in range(k % 6 + 1)])) for k in range(120)]
    with Client(live_server.url) as zv:
        out = list(zv.verify_stream(reqs, max_in_flight=8))
    assert [r.count for r in out] == [k % 6 + 1 for k in range(120)]
    assert all(r.valid == r.count for r in out)
    assert len({r.request_id for r in out}) == 120


def test_verify_stream_raises_an_error_reply_in_turn(live_server, items):
    good, _ = items
    frame = zap.encode_items("ed25519", *_cols(good[:1]))
    bad = bytearray(frame)
    bad[16] = 0x7F  # no scheme has code 0x7F
    with Client(live_server.url) as zv:
        stream = zv.verify_stream([frame, bad, frame], max_in_flight=4)
        assert next(stream).valid == 1
        with pytest.raises(RemoteError) as info:
            next(stream)
        assert info.value.code == "UNKNOWN_SCHEME"


def test_async_client_and_stream(live_server, items):
    good, mixed = items

    async def main():
        async with AsyncClient(live_server.url) as zv:
            r = await zv.verify_batch("ed25519", *_cols(mixed))
            assert r.verdicts.tolist() == [True, False, True]
            j = await zv.verify(mixed)
            assert j.merkle_root == r.merkle_root
            async with zv.stream(max_in_flight=4) as s:
                futures = [await s.submit(BatchRequest("ed25519", *_cols(good[:k + 1]))) for k in range(6)]
                futures += [await s.submit_items(mixed)]
                bad = bytearray(zap.encode_items("ed25519", *_cols(good[:1])))
                bad[19] = 1  # the request's reserved byte
                bad_future = await s.submit(bad)
                results = await asyncio.gather(*futures)
                assert [x.count for x in results] == [1, 2, 3, 4, 5, 6, 3]
                assert results[-1].verdicts == [True, False, True] and results[-1].merkle_root == r.merkle_root
                with pytest.raises(RemoteError) as info:
                    await bad_future
                assert info.value.code == "BAD_RESERVED"
                assert s.in_flight <= 4
                again = await s.verify_batch("ed25519", *_cols(good[:2]))  # still usable after the error
                assert again.valid == 2

    asyncio.run(main())


# ------------------------------------------------------------------ from a result to its receipt
@pytest.fixture(scope="module")
def receipts_server(engine, tmp_path_factory):
    from app.config import Settings
    from app.main import create_app
    from tests.server import LiveServer

    settings = Settings(receipts=True, data_dir=tmp_path_factory.mktemp("receipts"))
    with LiveServer(create_app(settings, runtime=Runtime(engine))) as server:
        yield server


def test_every_zap_result_names_its_receipt(receipts_server, items):
    good, mixed = items
    with Client(receipts_server.url) as zv:
        one = zv.verify_batch("ed25519", *_cols(mixed))
        streamed = list(zv.verify_stream([BatchRequest("ed25519", *_cols(mixed)),
                                          BatchRequest("ed25519", *_cols(good))]))
        for res in [one, *streamed]:
            assert res.batch_id is not None
            receipt = zv.receipt(res.batch_id)
            assert receipt["merkle_root"] == res.merkle_root.hex()
            assert receipt["count"] == res.count
    assert len({one.batch_id, *(r.batch_id for r in streamed)}) == 3
    assert [r.verdicts.tolist() for r in streamed] == [[True, False, True], [True] * 6]
    with Client(receipts_server.url) as zv, pytest.raises(RemoteError) as info:
        zv.receipt("0192f7c5-3e1a-7000-8a4e-2f0d6f1b9c11")
    assert info.value.status == 404
