"""NIC ingest against one slow or unauthenticated client (issue 37): a half-received frame has a
read deadline and a minimum rate, it is charged and lands as its bytes arrive, and with API keys
configured TCP and QUIC take frames only after the keyed handshake (docs/wire-format.md
section 8, "Ingest authentication"; docs/operations.md, "Access control" and "Load shedding").

Real sockets on loopback, deadlines shortened to fractions of a second.  Every wait is bounded;
the only timing asserted is that a cut comes after its deadline and within a few seconds of it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from app.api.security import ApiKey
from app.core.errors import ConfigError, RemoteError, WireError
from app.engine.admission import Admission
from app.engine.ingest import Ingest, IngestConfig
from app.engine.reference import kat
from app.engine.runtime import PoolConfig, Runtime
from app.engine.verify.engine import EngineConfig
from app.wire import zap
from zapverify.ingest import connect

LOCAL = "127.0.0.1"
LIMITS = zap.Limits(max_frame_bytes=64 * 1024, max_items=4096, max_message_bytes=4096)
STEP = 4096  # reserve_step_bytes of these tests: what a frame is charged and lands ahead of its bytes
KEY, WRONG, READER = "k-verify-0123456789abcdef", "k-wrong-0123456789abcdef", "k-reader-0123456789abcdef"
KEYS = [ApiKey(hashlib.sha256(KEY.encode()).digest(), frozenset({"verify"}), "client"),
        ApiKey(hashlib.sha256(READER.encode()).digest(), frozenset({"receipts"}), "reader")]


@pytest.fixture(scope="module")
def rt():
    runtime = Runtime.open(EngineConfig(backend="cpu", cpu_workers=1, cpu_parallelism="thread"),
                           PoolConfig(16 << 20, source="heap", debug=True))
    runtime.engine.start()
    assert runtime.engine.ready
    yield runtime
    runtime.close()


@pytest.fixture(scope="module")
def frames() -> list[bytes]:
    items = kat.sign_items("ed25519", 8, seed=37)
    return [bytes(zap.encode_items("ed25519", [i.public_key for i in items[:n]], [i.message for i in items[:n]],
                                   [i.signature for i in items[:n]])) for n in (1, 4, 8)]


@contextmanager
def running(rt: Runtime, **kw) -> Iterator[Ingest]:
    cfg = dict(tcp_port=0, limits=LIMITS, reserve_step_bytes=STEP, shutdown_seconds=5.0)
    cfg.update(kw)
    ing = Ingest(rt, IngestConfig(**cfg))
    ing.start()
    try:
        yield ing
    finally:
        ing.stop()


def run(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def until(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def header(size: int, request_id: int, ftype: int = zap.TYPE_REQUEST) -> bytes:
    return struct.pack("<4sHBBII", zap.MAGIC, zap.VERSION, ftype, 0, request_id, size)


def read_frame(sock: socket.socket) -> bytes | None:
    """One whole frame off ``sock``, or None at EOF before one."""
    buf = b""
    while len(buf) < zap.HEADER_SIZE:
        chunk = sock.recv(zap.HEADER_SIZE - len(buf))
        if not chunk:
            return None
        buf += chunk
    size = struct.unpack_from("<I", buf, 12)[0]
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def drained(sock: socket.socket) -> bool:
    """The server closed ``sock`` (EOF after whatever it still had to say)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


async def verify_all(transport: str, port: int, frames: list[bytes], **kw) -> list:
    async with connect(transport, LOCAL, port, max_in_flight=8, **kw) as s:
        futures = [await s.submit(f) for f in frames]
        return await asyncio.gather(*futures, return_exceptions=True)


# ------------------------------------------------------------------ deadlines
def test_a_header_alone_is_cut_within_the_deadline_and_others_are_admitted_meanwhile(rt, frames):
    """A 16-byte header declaring the whole byte bound, then nothing: before, it held the bound
    (every other frame OVERLOADED) for ever; now it holds one step and is cut with BODY_TIMEOUT."""
    admission = Admission(max_items=1 << 20, max_bytes=LIMITS.max_frame_bytes)
    timeout = 1.5  # long enough for the other clients to be served while the header waits
    with running(rt, quic_port=0, admission=admission, frame_timeout_seconds=timeout,
                 frame_min_bytes_per_second=0) as ing:
        counters = ing.counters["tcp"]
        with socket.create_connection((LOCAL, ing.ports["tcp"]), timeout=10) as attacker:
            got: list = []
            reader = threading.Thread(target=lambda: got.extend([read_frame(attacker), time.monotonic()]))
            t0 = time.monotonic()
            attacker.sendall(header(LIMITS.max_frame_bytes, request_id=9))
            reader.start()
            assert until(lambda: admission.snapshot()["requests_in_flight"] == 1)
            assert admission.snapshot()["bytes_in_flight"] <= STEP  # not the 64 KiB it declares
            results = run(verify_all("tcp", ing.ports["tcp"], frames * 4))  # meanwhile, on TCP
            results += run(verify_all("quic", ing.ports["quic"], frames * 4))  # and on QUIC
            assert not got, "the others were served only after the cut: the test shows nothing"
            reader.join(timeout + 5)
            err, at = got
            assert err is not None and drained(attacker)
        e = zap.decode_error(err)
        assert (e.name, e.request_id) == ("BODY_TIMEOUT", 9)
        assert timeout * 0.9 <= at - t0 < timeout + 3
        assert [type(r).__name__ for r in results] == ["BatchVerdicts"] * 24
        assert until(lambda: admission.snapshot()["bytes_in_flight"] == 0)
    st = counters.snapshot()  # once stopped: a reply is counted when its write completes
    assert st["dropped"]["body_timeout"] == 1 and st["frames_verified"] == 12
    assert rt.pool.stats()["buffers_in_use"] == 0


def test_a_frame_trickling_under_the_minimum_rate_is_cut_and_a_brisk_one_with_pauses_is_not(rt, frames):
    """Gaps shorter than the timeout, but 1 KB/s against a 4 KB/s minimum: cut at about
    start + timeout + received / rate.  A frame sent in pieces with shorter pauses is verified."""
    timeout, rate = 0.5, 4000.0
    with running(rt, frame_timeout_seconds=timeout, frame_min_bytes_per_second=rate) as ing:
        port = ing.ports["tcp"]
        with socket.create_connection((LOCAL, port), timeout=10) as ok:
            good = frames[2]
            for at in range(0, len(good), len(good) // 3 + 1):
                ok.sendall(good[at:at + len(good) // 3 + 1])
                time.sleep(0.2)
            assert zap.decode_response(read_frame(ok)).count == 8

        with socket.create_connection((LOCAL, port), timeout=10) as slow:
            slow.sendall(header(32 * 1024, request_id=5))
            t0 = time.monotonic()
            cut = threading.Event()

            def trickle():
                sent = zap.HEADER_SIZE
                while not cut.is_set() and sent < 32 * 1024 - 100:
                    try:
                        slow.sendall(b"\0" * 100)
                    except OSError:
                        return
                    sent += 100
                    cut.wait(0.1)

            t = threading.Thread(target=trickle)
            t.start()
            try:
                err = read_frame(slow)
                elapsed = time.monotonic() - t0
            finally:
                cut.set()
                t.join(5)
        e = zap.decode_error(err)
        assert (e.name, e.request_id) == ("BODY_TIMEOUT", 5) and "bytes/s" in e.message
        # 1 KB/s against 4 KB/s after a 0.5 s grace: due near 0.67 s, long before the 32 KiB are in.
        assert timeout <= elapsed < 3
    st = ing.counters["tcp"].snapshot()
    assert st["dropped"]["body_timeout"] == 1 and st["frames_verified"] == 1
    assert rt.pool.stats()["buffers_in_use"] == 0


def test_a_quic_stream_that_stalls_is_answered_body_timeout_and_the_connection_goes_on(rt, frames):
    with running(rt, tcp_port=None, quic_port=0, frame_timeout_seconds=0.3, frame_min_bytes_per_second=0) as ing:
        async def main():
            async with connect("quic", LOCAL, ing.ports["quic"]) as s:
                quic = s.protocol._quic
                sid = quic.get_next_available_stream_id()
                stalled = asyncio.get_running_loop().create_future()
                s._pending[sid] = stalled
                await s._slots.acquire()
                quic.send_stream_data(sid, header(32 * 1024, request_id=3) + bytes(1000), end_stream=False)
                s.protocol.transmit()
                t0 = time.monotonic()
                with pytest.raises(RemoteError) as info:
                    await stalled
                elapsed = time.monotonic() - t0
                after = await (await s.submit(frames[1]))  # the same connection still serves
                return info.value, elapsed, after

        err, elapsed, after = run(main())
    st = ing.counters["quic"].snapshot()
    assert err.code == "BODY_TIMEOUT" and 0.25 <= elapsed < 3
    assert after.count == 4 and after.valid == 4
    assert st["dropped"]["body_timeout"] == 1 and st["frames_verified"] == 1
    assert rt.pool.stats()["buffers_in_use"] == 0


# ------------------------------------------------------------------ charged as it arrives
def test_the_admission_charge_and_pool_memory_of_a_partial_frame_follow_what_arrived(rt):
    admission = Admission(max_items=1 << 20, max_bytes=1 << 20)
    declared, sent = 60 * 1024, 10_000
    with running(rt, quic_port=0, admission=admission, frame_timeout_seconds=10) as ing:
        with socket.create_connection((LOCAL, ing.ports["tcp"]), timeout=10) as s:
            s.sendall(header(declared, request_id=1) + bytes(sent))
            received = zap.HEADER_SIZE + sent
            assert until(lambda: ing.counters["tcp"].snapshot()["bytes_received"] >= received)
            assert until(lambda: admission.snapshot()["bytes_in_flight"] >= received)
            charged = admission.snapshot()["bytes_in_flight"]
            held = rt.pool.stats()["by_owner"].get("ingest", 0)
        assert received <= charged <= received + STEP < declared
        assert held <= 2 * received < declared  # a buffer that doubles as the bytes come, not 60 KiB
        assert until(lambda: admission.snapshot()["bytes_in_flight"] == 0)  # the connection closed: given back

        async def quic_partial():
            async with connect("quic", LOCAL, ing.ports["quic"]) as q:
                quic = q.protocol._quic
                quic.send_stream_data(quic.get_next_available_stream_id(), header(declared, 2) + bytes(sent))
                q.protocol.transmit()
                ok = await asyncio.to_thread(until, lambda: admission.snapshot()["bytes_in_flight"] >= received)
                return ok, admission.snapshot()["bytes_in_flight"]

        ok, charged = run(quic_partial())
        assert ok and received <= charged <= received + STEP
        assert until(lambda: admission.snapshot()["bytes_in_flight"] == 0)
        dropped = {t: ing.counters[t].snapshot()["dropped"] for t in ("tcp", "quic")}
    assert dropped["tcp"]["truncated"] == 1 and dropped["quic"]["disconnected"] == 1
    assert rt.pool.stats()["buffers_in_use"] == 0


# ------------------------------------------------------------------ authentication
def test_the_auth_frames_and_mac_are_what_the_wire_doc_says():
    challenge = bytes(range(32))
    frame = zap.encode_challenge(challenge)
    assert len(frame) == 56 and frame[6] == 0x10 and frame[16] == 1 and frame[17:24] == bytes(7)
    assert zap.decode(bytes(frame)) == zap.AuthFrame(0x10, 0, 1, challenge)
    digest = hashlib.sha256(KEY.encode()).digest()
    mac = hmac.new(digest, b"zapverify/ingest-auth/v1\x00" + challenge, hashlib.sha256).digest()
    assert zap.auth_mac(digest, challenge) == mac
    auth = zap.encode_auth(mac)
    assert auth[6] == 0x11 and zap.decode_auth(bytes(auth)).value == mac
    for at, value in ((16, 2), (20, 1)):  # an unknown method, a reserved byte
        bad = bytearray(auth)
        bad[at] = value
        with pytest.raises(WireError) as info:
            zap.decode_auth(bytes(bad))
        assert info.value.code == ("BAD_OPTIONS" if at == 16 else "BAD_RESERVED")


def test_with_keys_an_unauthenticated_client_is_refused_and_nothing_is_verified(rt, frames):
    with running(rt, quic_port=0, auth_keys=KEYS, handshake_timeout_seconds=5) as ing:
        port = ing.ports["tcp"]
        with socket.create_connection((LOCAL, port), timeout=10) as s:  # a client that knows nothing of it
            challenge = zap.decode(read_frame(s))
            assert isinstance(challenge, zap.AuthFrame) and challenge.type == zap.TYPE_CHALLENGE
            s.sendall(frames[0])
            err = zap.decode_error(read_frame(s))
            assert (err.name, err.request_id) == ("UNAUTHORIZED", 0) and drained(s)
        tcp = run(verify_all("tcp", port, frames))  # the client library without api_key
        quic = run(verify_all("quic", ing.ports["quic"], frames))
    st = {t: ing.counters[t].snapshot() for t in ("tcp", "quic")}
    for result in tcp + quic:
        assert isinstance(result, RemoteError) and result.code == "UNAUTHORIZED", result
    # Not one frame reached the ring, let alone a backend.
    assert st["tcp"]["frames_queued"] == st["quic"]["frames_queued"] == 0
    assert st["tcp"]["frames_verified"] == st["quic"]["frames_verified"] == 0
    assert st["tcp"]["dropped"]["unauthorized"] == 2 and st["quic"]["dropped"]["unauthorized"] == 1


def test_with_keys_the_right_key_verifies_and_a_wrong_or_unscoped_one_is_refused(rt, frames):
    with running(rt, quic_port=0, auth_keys=KEYS, handshake_timeout_seconds=5) as ing:
        ports = ing.ports
        for transport in ("tcp", "quic"):
            good = run(verify_all(transport, ports[transport], frames * 2, api_key=KEY))
            assert [r.count for r in good] == [1, 4, 8] * 2 and all(r.valid == r.count for r in good), transport
        # TCP: the server answers a refused handshake with an error frame, so every request fails with it.
        wrong = run(verify_all("tcp", ports["tcp"], frames, api_key=WRONG))
        unscoped = run(verify_all("tcp", ports["tcp"], frames, api_key=READER))
        assert {r.code for r in wrong} == {"UNAUTHORIZED"} and {r.code for r in unscoped} == {"FORBIDDEN"}
        # QUIC: connect waits for the server to accept the key, so it raises.
        for key, code in ((WRONG, "UNAUTHORIZED"), (READER, "FORBIDDEN")):
            with pytest.raises(RemoteError) as info:
                run(verify_all("quic", ports["quic"], frames, api_key=key))
            assert info.value.code == code
        assert ing.status()["authentication"] == "api-key"
    st = {t: ing.counters[t].snapshot() for t in ("tcp", "quic")}
    assert st["tcp"]["frames_verified"] == st["quic"]["frames_verified"] == 6
    assert st["tcp"]["dropped"]["unauthorized"] == st["quic"]["dropped"]["unauthorized"] == 2


def test_with_keys_a_handshake_not_done_in_time_is_cut(rt, frames):
    with running(rt, quic_port=0, auth_keys=KEYS, handshake_timeout_seconds=0.3) as ing:
        with socket.create_connection((LOCAL, ing.ports["tcp"]), timeout=10) as s:
            t0 = time.monotonic()
            assert zap.decode(read_frame(s)).type == zap.TYPE_CHALLENGE
            s.sendall(zap.encode_auth(bytes(32))[:20])  # part of an auth frame, then nothing
            err = zap.decode_error(read_frame(s))
            elapsed = time.monotonic() - t0
            assert drained(s)
        assert err.name == "UNAUTHORIZED" and "within 0.3 s" in err.message and 0.25 <= elapsed < 3

        async def idle_quic():
            async with connect("quic", LOCAL, ing.ports["quic"]) as q:  # never answers the challenge
                while q.protocol.terminated is None:
                    await asyncio.sleep(0.02)
                return q.protocol.terminated

        refused = run(idle_quic())
        assert isinstance(refused, RemoteError) and refused.code == "UNAUTHORIZED"
        dropped = {t: ing.counters[t].snapshot()["dropped"]["unauthorized"] for t in ("tcp", "quic")}
    assert dropped == {"tcp": 1, "quic": 1}


def test_with_keys_each_frame_takes_a_token_of_its_key(rt, frames):
    tokens = {"client": 2}

    def take(name: str) -> float:
        tokens[name] -= 1
        return 0.0 if tokens[name] >= 0 else 1.5

    with running(rt, auth_keys=KEYS, rate=take) as ing:
        results = run(verify_all("tcp", ing.ports["tcp"], frames, api_key=KEY))
    st = ing.counters["tcp"].snapshot()
    assert [type(r).__name__ for r in results[:2]] == ["BatchVerdicts"] * 2
    assert isinstance(results[2], RemoteError) and results[2].code == "RATE_LIMITED"
    assert st["dropped"]["rate_limited"] == 1 and st["frames_verified"] == 2


def test_with_keys_udp_refuses_to_start_unless_its_network_is_declared_trusted(rt, frames):
    ing = Ingest(rt, IngestConfig(udp_port=0, tcp_port=0, auth_keys=KEYS))
    with pytest.raises(ConfigError) as info:
        ing.start()
    assert info.value.field == "ingest_udp_unauthenticated" and not ing.listeners
    with running(rt, udp_port=0, auth_keys=KEYS, udp_unauthenticated=True) as ing:
        results = run(verify_all("udp", ing.ports["udp"], frames))
    assert [r.count for r in results] == [1, 4, 8]
    with running(rt, udp_port=0, tcp_port=None) as ing:  # no keys: as before
        assert run(verify_all("udp", ing.ports["udp"], frames))[2].count == 8


def test_the_settings_reach_the_listeners():
    from app.config import Settings
    from app.engine.configs import ingest_config

    s = Settings(body_read_timeout_seconds=7, body_min_bytes_per_second=123, zap_reserve_step_bytes=8192,
                 header_timeout_seconds=3, ingest_udp_unauthenticated=True)
    cfg = ingest_config(s, keys=KEYS)
    assert (cfg.frame_timeout_seconds, cfg.frame_min_bytes_per_second, cfg.reserve_step_bytes) == (7, 123, 8192)
    assert (cfg.handshake_timeout_seconds, cfg.udp_unauthenticated, list(cfg.auth_keys)) == (3, True, KEYS)


def test_an_ingest_frame_that_cannot_finish_by_the_deadline_is_refused_once_its_items_are_known(rt, frames):
    """Ingest frames are charged their items and work like HTTP requests (app/engine/admission.py):
    behind 10 s of work in flight and a 2 s default deadline, a frame is answered OVERLOADED,
    not verified; alone it is."""
    admission = Admission(max_items=10**6, max_bytes=1 << 30, default_deadline=2.0)
    admission.rates.observe("ed25519", 2, 0.08, end=0.5)  # the cold first batch (not taken)
    admission.rates.observe("ed25519", 1000, 1.0, end=1.5)  # 1 ms per item
    with running(rt, admission=admission) as ing:
        port = ing.ports["tcp"]
        # 10 s of the same client's work ahead (ingest frames are client ""), with a deadline
        # of its own that it meets.
        held = asyncio.run(admission.enter("", 300.0))
        held.add_items({"ed25519": 10_000})
        try:
            results = run(verify_all("tcp", port, frames[:1]))
            assert isinstance(results[0], RemoteError) and results[0].code == "OVERLOADED", results
            assert admission.snapshot()["refused_by"]["deadline"] >= 1
        finally:
            held.release()
        results = run(verify_all("tcp", port, frames[:1]))
        assert results[0].count == results[0].valid == 1
        assert until(lambda: admission.snapshot()["work_in_flight"] == 0.0)
