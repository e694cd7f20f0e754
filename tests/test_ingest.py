"""NIC ingest (app/engine/ingest): real sockets on loopback, several clients per transport.

Every test bounds its waits (asyncio.wait_for, socket timeouts); none asserts on timing.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

from app.core.errors import ConfigError, RemoteError
from app.core.result import Result
from app.core.schemes import SCHEMES
from app.engine.backends.base import READY, Backend, Capabilities
from app.engine.commit import merkle
from app.engine.ingest import Ingest, IngestConfig
from app.engine.receipts.open import open_store
from app.engine.reference import kat
from app.engine.runtime import PoolConfig, Runtime
from app.engine.verify.engine import EngineConfig
from app.wire import zap
from zapverify.ingest import connect

LOCAL = "127.0.0.1"
TRANSPORTS = ("tcp", "udp", "quic")
#: Frame limit of these tests: small, so that "too large" costs nothing to send.
LIMITS = zap.Limits(max_frame_bytes=64 * 1024, max_items=4096, max_message_bytes=4096)


def pooled_runtime(backends=(), pool_bytes: int = 16 << 20) -> Runtime:
    rt = Runtime.open(EngineConfig(backend="cpu" if not backends else "auto", cpu_workers=2, cpu_parallelism="thread"),
                      PoolConfig(pool_bytes, source="heap", debug=True), backends=backends)
    rt.engine.start()
    assert rt.engine.ready
    return rt


@pytest.fixture(scope="module")
def engine_p():
    rt = pooled_runtime()
    yield rt
    rt.close()


@contextmanager
def running(rt: Runtime, store=None, **kw):
    cfg = dict(tcp_port=0, udp_port=0, quic_port=0, limits=LIMITS, shutdown_seconds=10.0)
    cfg.update(kw)
    ing = Ingest(with_store(rt, store), IngestConfig(**cfg))
    ing.start()
    try:
        yield ing
    finally:
        ing.stop()


def run(coro, timeout: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


# ------------------------------------------------------------------ a catalogue of frames
class Known:
    """A frame and what the server must answer: verdicts and the RFC 6962 root."""

    def __init__(self, scheme: str, items: list[kat.Item], bad: set[int], **kw):
        self.items = [it if i not in bad else kat.Item(it.scheme, it.public_key, it.message + b"x", it.signature,
                                                       it.context, it.prehashed, it.allow_high_s)
                      for i, it in enumerate(items)]
        self.verdicts = [i not in bad for i in range(len(items))]
        self.frame = bytes(zap.encode_items(scheme, [i.public_key for i in self.items],
                                            [i.message for i in self.items], [i.signature for i in self.items],
                                            **kw))
        code = SCHEMES[scheme].code
        self.root = merkle.root([merkle.leaf_hash(code, v, it.public_key, it.message, it.signature)
                                 for it, v in zip(self.items, self.verdicts)])

    def check(self, result) -> None:
        assert result.verdicts.tolist() == self.verdicts
        assert result.merkle_root == self.root


@pytest.fixture(scope="module")
def catalogue() -> list[Known]:
    out = []
    ed = kat.sign_items("ed25519", 48, seed=21)
    for n in range(1, 9):  # sizes 1..8, the bad item moving around: no two frames answer alike
        out.append(Known("ed25519", ed[n:n + n], {n % 3} if n > 1 else set()))
    sk = kat.sign_items("secp256k1", 12, seed=22)
    for n in (2, 3, 5):
        out.append(Known("secp256k1", sk[n:n + n], {0}))
    ph = kat.sign_items("secp256k1", 4, seed=23, prehashed=True)
    out.append(Known("secp256k1", ph, {2}, prehashed=True))
    out.append(Known("ed25519", (ed * 2)[:64], {5, 40}))  # larger than the others
    return out


async def drive(transport: str, port: int, known: list[Known], picks: list[int], *, max_in_flight: int = 32,
                **kw) -> list[tuple[int, object]]:
    """Send ``known[i].frame`` for each ``i`` of ``picks``, pipelined; (i, result) back."""
    async with connect(transport, LOCAL, port, max_in_flight=max_in_flight, **kw) as s:
        futures = [(i, await s.submit(known[i].frame)) for i in picks]
        return [(i, await f) for i, f in futures]


# ------------------------------------------------------------------ many clients, right verdicts
@pytest.mark.parametrize("transport, clients, frames", [("tcp", 4, 800), ("udp", 4, 500), ("quic", 3, 350)])
def test_many_clients_get_their_verdicts(engine_p, catalogue, transport, clients, frames):
    rng = random.Random(transport)
    picks = [[rng.randrange(len(catalogue)) for _ in range(frames)] for _ in range(clients)]
    with running(engine_p) as ing:
        port = ing.ports[transport]

        async def main():
            return await asyncio.gather(*(drive(transport, port, catalogue, p) for p in picks))

        results = run(main())
    # Read once stopped: a reply is counted when its write completes, which may be just after
    # the client has read it; stop() waits for every reply.
    st = ing.status()["transports"][transport]
    coalesced = ing.status()["coalesce"]["joined_frames_total"]
    for per_client, p in zip(results, picks):
        assert [i for i, _ in per_client] == p
        for i, result in per_client:
            catalogue[i].check(result)
    total = clients * frames
    assert st["frames_verified"] == st["replies_sent"] >= total  # UDP may have answered a resent frame twice
    assert st["frames_received"] == st["frames_verified"] + st["dropped_total"]
    assert st["port"] == port and st["ring_high_water"] >= 1
    assert coalesced > 0  # small frames of one scheme were verified together
    assert engine_p.pool.stats()["buffers_in_use"] == 0


# ------------------------------------------------------------------ bad frames
def _bad_magic(frame: bytes) -> bytes:
    return b"ZAQ\0" + frame[4:]


def _too_large_header(frame: bytes) -> bytes:
    return frame[:12] + struct.pack("<I", LIMITS.max_frame_bytes + 8) + frame[16:]


def _bad_padding(frame: bytes) -> bytes:
    return frame[:-1] + b"\x01"  # the last padding byte of msgs (8-byte messages + pad)


def test_tcp_bad_frames_are_answered_counted_and_others_served(engine_p, catalogue):
    good = catalogue[3]

    def exchange(data: bytes, *, shut: bool = False) -> list[bytes]:
        """Send ``data`` on a fresh connection, read frames until the server closes."""
        with socket.create_connection((LOCAL, ing.ports["tcp"]), timeout=10) as s:
            s.sendall(data)
            if shut:
                s.shutdown(socket.SHUT_WR)
            buf = b""
            while chunk := s.recv(65536):
                buf += chunk
        frames, at = [], 0
        while at < len(buf):
            size = struct.unpack_from("<I", buf, at + 12)[0]
            frames.append(buf[at:at + size])
            at += size
        return frames

    with running(engine_p) as ing:
        async def client():
            return await drive("tcp", ing.ports["tcp"], catalogue, list(range(len(catalogue))) * 20)

        done = threading.Event()
        results: list = []
        t = threading.Thread(target=lambda: (results.extend(run(client())), done.set()))
        t.start()
        # bad magic: one error frame, then the server closes (the stream's framing is lost)
        (err,) = exchange(_bad_magic(good.frame) + good.frame)
        assert zap.decode_error(err).name == "BAD_MAGIC"
        # a size over the limit: FRAME_TOO_LARGE, addressed to the frame's request id, then closed
        framed = bytearray(_too_large_header(good.frame))
        framed[8:12] = (77).to_bytes(4, "little")
        (err,) = exchange(bytes(framed))
        e = zap.decode_error(err)
        assert (e.name, e.request_id) == ("FRAME_TOO_LARGE", 77)
        # truncated: the client ends its side in the middle of a frame; the one before is answered
        replies = exchange(good.frame + good.frame[:40], shut=True)
        assert [zap.decode_response(r).verdicts.astype(bool).tolist() for r in replies] == [good.verdicts]
        # a bad body keeps the framing: error frame with its request id, and the next frame is served
        bad_body = bytearray(_bad_padding(good.frame))
        bad_body[8:12] = (5).to_bytes(4, "little")
        replies = exchange(bytes(bad_body) + good.frame, shut=True)
        e = zap.decode_error(replies[0])
        assert (e.name, e.request_id) == ("BAD_PADDING", 5)
        assert zap.decode_response(replies[1]).verdicts.astype(bool).tolist() == good.verdicts
        assert done.wait(60)
        st = ing.status()["transports"]["tcp"]
    for i, result in results:
        catalogue[i].check(result)
    d = st["dropped"]
    assert (d["bad_magic"], d["too_large"], d["truncated"], d["malformed"]) == (1, 1, 1, 1)
    assert st["error_replies_sent"] == 3
    assert engine_p.pool.stats()["buffers_in_use"] == 0


def test_udp_bad_datagrams_are_dropped_counted_and_others_served(engine_p, catalogue):
    good = catalogue[5]
    with running(engine_p) as ing:
        port = ing.ports["udp"]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(10)
            for bad in (_bad_magic(good.frame), good.frame[:-8], good.frame + bytes(8), _too_large_header(good.frame),
                        b"ZA", good.frame[:10]):
                s.sendto(bad, (LOCAL, port))
            framed = bytearray(_bad_padding(good.frame))
            framed[8:12] = (9).to_bytes(4, "little")
            s.sendto(bytes(framed), (LOCAL, port))
            e = zap.decode_error(s.recv(65536))  # only the bad body is answered
            assert (e.name, e.request_id) == ("BAD_PADDING", 9)
        results = run(drive("udp", port, catalogue, list(range(len(catalogue))) * 10))
        st = ing.status()["transports"]["udp"]
    for i, result in results:
        catalogue[i].check(result)
    d = st["dropped"]
    assert (d["bad_magic"], d["truncated"], d["too_large"], d["malformed"]) == (1, 3, 2, 1)
    assert engine_p.pool.stats()["buffers_in_use"] == 0


def test_quic_bad_streams_are_dropped_counted_and_others_served(engine_p, catalogue):
    good = catalogue[6]
    with running(engine_p) as ing:
        port = ing.ports["quic"]

        async def main():
            async with connect("quic", LOCAL, port) as s:
                outcomes = {}
                for name, data in (("magic", _bad_magic(good.frame)), ("short", good.frame[:-8]),
                                   ("long", good.frame + bytes(8)), ("huge", _too_large_header(good.frame))):
                    with pytest.raises(RemoteError) as e:
                        await asyncio.wait_for(await s.send_raw(data), 10)
                    outcomes[name] = e.value.code
                framed = bytearray(_bad_padding(good.frame))
                with pytest.raises(RemoteError) as e:
                    await (await s.submit(bytes(framed)))
                outcomes["padding"] = e.value.code
                futures = [(i, await s.submit(catalogue[i].frame)) for i in list(range(len(catalogue))) * 10]
                return outcomes, [(i, await f) for i, f in futures]

        outcomes, results = run(main())
        st = ing.status()["transports"]["quic"]
    assert outcomes == {"magic": "BAD_MAGIC", "short": "BAD_SIZE", "long": "FRAME_TOO_LARGE",
                        "huge": "FRAME_TOO_LARGE", "padding": "BAD_PADDING"}
    for i, result in results:
        catalogue[i].check(result)
    d = st["dropped"]
    assert (d["bad_magic"], d["truncated"], d["too_large"], d["malformed"]) == (1, 1, 2, 1)
    assert engine_p.pool.stats()["buffers_in_use"] == 0


# ------------------------------------------------------------------ flow control
def test_tcp_client_that_stops_reading_does_not_stall_others(engine_p, catalogue):
    frame = catalogue[0].frame
    with running(engine_p, max_in_flight=8, tcp_sndbuf=4096, udp_port=None, quic_port=None) as ing:
        port = ing.ports["tcp"]
        hog = socket.socket()
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.connect((LOCAL, port))
        hog.settimeout(0.5)
        sent = 0
        try:
            for _ in range(20000):  # never reads: its window fills, then ours, then sendall times out
                hog.sendall(frame)
                sent += 1
        except (TimeoutError, OSError):
            pass
        results = run(drive("tcp", port, catalogue, list(range(len(catalogue))) * 30))
        for i, result in results:
            catalogue[i].check(result)
        st = ing.status()["transports"]["tcp"]
        held = engine_p.pool.stats()["buffers_in_use"]
        hog.close()
    assert sent > 8  # the hog got frames in before it was held back
    # It holds at most its in-flight bound of buffers (+ the frame being received), not one per frame sent.
    assert held <= 8 + 1
    assert st["frames_received"] < sent


class SlowBackend(Backend):
    """An accelerator stand-in for Ed25519: CPU verdicts, ``delay`` seconds late for frames, and
    a check that the memory it was given did not change while it held it.

    ``hold(batch)``, when set, runs while the backend holds a batch (tests of the check)."""

    name = "slow"

    def __init__(self, delay: float, pool=None, hold=None):
        from app.engine.backends.cpu import CpuBackend

        self.cpu = CpuBackend(workers=1, parallelism="thread")
        self.delay, self.pool, self.hold = delay, pool, hold
        self.calls = self.changed = self.owned_by_backend = 0
        self.addresses: set[int] = set()

    def capabilities(self):
        return Capabilities(schemes={"ed25519": READY})

    def run(self, batch, *, commit=False):
        if batch.source != "zap":  # the start-up self-test
            return Result.of(self.name, self.cpu.run(batch).verdicts)
        self.calls += 1
        self.addresses.add(batch.pks.ctypes.data)
        before = [c.copy() for c in (batch.pks, batch.sigs, batch.msgs, batch.offsets)]
        if self.pool is not None and self.pool.stats()["by_owner"]["backend"] > 0:
            self.owned_by_backend += 1
        time.sleep(self.delay)
        if self.hold is not None:
            self.hold(batch)
        after = (batch.pks, batch.sigs, batch.msgs, batch.offsets)
        if not all(np.array_equal(a, b) for a, b in zip(before, after)):
            self.changed += 1
        return Result.of(self.name, self.cpu.run(batch).verdicts)

    def close(self):
        self.cpu.close()


def with_store(rt: Runtime, store) -> Runtime:
    """``rt``'s engine and pool with ``store`` for receipts (None: off)."""
    return Runtime(rt.engine, host=rt.host, pick=rt.pick, pool=rt.pool, store=store)


def _engine_with(backend) -> Runtime:
    rt = pooled_runtime(backends=[backend], pool_bytes=4 << 20)
    backend.pool = rt.pool
    return rt


def _ed25519(catalogue) -> list[int]:
    return [i for i, k in enumerate(catalogue) if k.items[0].scheme == "ed25519"]


def test_full_ring_holds_tcp_and_quic_back_and_drops_udp(catalogue):
    slow = SlowBackend(0.01)
    eng = _engine_with(slow)
    ed = _ed25519(catalogue)
    try:
        with running(eng, ring_slots=2, coalesce_items=8) as ing:
            async def main():
                return await asyncio.gather(
                    *(drive("tcp", ing.ports["tcp"], catalogue, ed * 3, max_in_flight=8) for _ in range(3)),
                    *(drive("quic", ing.ports["quic"], catalogue, ed * 3, max_in_flight=8) for _ in range(2)),
                    drive("udp", ing.ports["udp"], catalogue, ed * 3, max_in_flight=8, retry_seconds=0.1,
                          retries=50))

            results = run(main(), timeout=120)
            st = ing.status()["transports"]
    finally:
        eng.close()
    for per_client in results:
        for i, result in per_client:
            catalogue[i].check(result)
    assert st["tcp"]["backpressure_total"] > 0 and st["tcp"]["dropped_total"] == 0
    assert st["quic"]["backpressure_total"] > 0 and st["quic"]["dropped_total"] == 0
    assert st["udp"]["dropped"]["ring_full"] > 0  # and the client's resends got through
    assert slow.calls > 0 and slow.changed == 0


# ------------------------------------------------------------------ buffer ownership
def test_no_buffer_is_reused_while_a_backend_holds_it(catalogue):
    slow = SlowBackend(0.01)
    eng = _engine_with(slow)
    ed = _ed25519(catalogue)
    try:
        with running(eng, workers=2, coalesce_items=16) as ing:
            async def main():
                return await asyncio.gather(*(drive(t, ing.ports[t], catalogue, ed * 8, max_in_flight=8)
                                              for t in TRANSPORTS * 2))

            results = run(main(), timeout=120)
        stats = eng.pool.stats()
    finally:
        eng.close()
    for per_client in results:
        for i, result in per_client:
            catalogue[i].check(result)
    # The backend always held its memory as owner "backend", and the pool (LIFO slots, debug
    # poisoning on release) handed the same memory to later frames: an early release would show.
    assert slow.calls > 10 and slow.owned_by_backend == slow.calls
    assert len(slow.addresses) < slow.calls
    assert slow.changed == 0  # nothing wrote into memory a backend was reading
    assert stats["misuse_total"] == 0 and stats["buffers_in_use"] == 0


def test_the_check_sees_memory_released_under_a_backend(catalogue):
    """The check above can fail: a buffer released (and taken again) while the backend holds
    its batch changes what the backend reads."""
    from app.engine.memory.pool import UmaPool

    frame, other = catalogue[3].frame, catalogue[4].frame[:len(catalogue[3].frame)]
    with UmaPool.create(4 << 20, "heap", debug=True) as pool:
        buf = pool.acquire(len(frame), "ingest")
        buf.array[:] = np.frombuffer(frame, dtype=np.uint8)
        batch = zap.decode_request(buf.array).batch

        def release_and_reuse(_):
            buf.release()  # the bug under test
            again = pool.acquire(len(frame), "ingest")
            again.array[:] = np.frombuffer(other, dtype=np.uint8)

        slow = SlowBackend(0.0, hold=release_and_reuse)
        slow.run(batch)
    assert slow.changed == 1


def test_no_pool_room_is_answered_pool_exhausted_and_the_connection_goes_on(catalogue):
    """A 4 KiB pool holds four 1 KiB frames; a slow backend keeps them, so the next ones find no
    room: TCP waits pool_wait_seconds then answers POOL_EXHAUSTED (and reads on), QUIC at once."""
    slow = SlowBackend(0.1)
    eng = pooled_runtime(backends=[slow], pool_bytes=4096)
    frame = catalogue[7]  # 8 items: a 1 KiB slot
    try:
        with running(eng, udp_port=None, pool_wait_seconds=0.05, coalesce_items=1) as ing:
            async def main(transport):
                async with connect(transport, LOCAL, ing.ports[transport], max_in_flight=16) as s:
                    first = await asyncio.gather(*[await s.submit(frame.frame) for _ in range(12)],
                                                 return_exceptions=True)
                    return first, await (await s.submit(frame.frame))  # the same connection still serves

            out = {t: run(main(t)) for t in ("tcp", "quic")}
            st = ing.status()["transports"]
    finally:
        eng.close()
    for t, (first, last) in out.items():
        refused = [r for r in first if isinstance(r, RemoteError)]
        assert refused and all(r.code == "POOL_EXHAUSTED" for r in refused), t
        for r in first:
            if not isinstance(r, Exception):
                frame.check(r)
        frame.check(last)
        assert st[t]["dropped"]["pool_exhausted"] == len(refused) and st[t]["error_replies_sent"] == len(refused)


# ------------------------------------------------------------------ shutdown
def test_shutdown_answers_every_frame_taken_in_and_closes_the_ports(engine_p, catalogue, tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'receipts.sqlite3'}")
    ing = Ingest(with_store(engine_p, store), IngestConfig(tcp_port=0, udp_port=0, quic_port=0, limits=LIMITS))
    ing.start()
    ports = ing.ports
    received: dict[str, list] = {t: [] for t in TRANSPORTS}
    stuck: list[str] = []
    stopped = asyncio.Event()

    async def client(transport):
        """Keeps sending until the server has stopped, then collects every answer it can."""
        # UDP: no resends (a resent frame is answered twice) and time enough for every answer.
        async with connect(transport, LOCAL, ports[transport], max_in_flight=16, retry_seconds=3,
                           retries=0) as s:
            futures = []
            k = 0
            while not stopped.is_set():
                i = k % len(catalogue)
                k += 1
                try:
                    futures.append((i, await asyncio.wait_for(s.submit(catalogue[i].frame), 5)))
                except Exception:  # the server is gone
                    break
            for i, f in futures:
                try:
                    received[transport].append((i, await asyncio.wait_for(f, 20)))
                except TimeoutError:
                    stuck.append(transport)
                except Exception:  # never taken in (or, UDP, taken in after it stopped reading)
                    pass

    async def main():
        tasks = [asyncio.create_task(client(t)) for t in TRANSPORTS]
        while min(ing.counters[t].replies_sent for t in TRANSPORTS) < 100:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(ing.stop)
        stopped.set()
        await asyncio.gather(*tasks)

    try:
        run(main(), timeout=90)
        stats = {t: ing.counters[t].snapshot() for t in TRANSPORTS}
        by_source = {t: 0 for t in TRANSPORTS}
        after = None
        while page := store.page(after, limit=1000):
            for r in page:
                by_source[r.source] += 1
            after = page[-1].id
    finally:
        store.close()
    assert stuck == []
    for t in TRANSPORTS:
        for i, result in received[t]:
            catalogue[i].check(result)
        st = stats[t]
        # Every frame taken in was verified and answered; every answer reached its client and has a receipt.
        assert st["frames_queued"] == st["frames_verified"] == st["replies_sent"] >= 100, (t, st)
        assert len(received[t]) == st["replies_sent"] == by_source[t], (t, st, by_source)
    assert engine_p.pool.stats()["buffers_in_use"] == 0
    with pytest.raises(OSError):
        socket.create_connection((LOCAL, ports["tcp"]), timeout=2).close()


# ------------------------------------------------------------------ start-up errors
def test_a_port_in_use_is_a_config_error_naming_the_setting(engine_p):
    with socket.socket() as taken:
        taken.bind((LOCAL, 0))
        taken.listen()
        ing = Ingest(engine_p, IngestConfig(tcp_port=taken.getsockname()[1], udp_port=0))
        with pytest.raises(ConfigError) as e:
            ing.start()
    assert e.value.field == "ingest_tcp_port" and not ing.listeners


def test_workers_can_share_the_ports_with_reuse_port(engine_p, catalogue):
    with running(engine_p, reuse_port=True) as first:
        ports = first.ports
        with running(engine_p, reuse_port=True, tcp_port=ports["tcp"], udp_port=ports["udp"],
                     quic_port=ports["quic"]) as second:
            assert second.ports == ports
            async def main():
                return await asyncio.gather(*(drive(t, ports[t], catalogue, [0, 5, 9] * 10) for t in TRANSPORTS))

            results = run(main())
    for per_client in results:
        for i, result in per_client:
            catalogue[i].check(result)


def test_frames_before_the_engine_is_ready_are_answered_not_ready(catalogue):
    eng = Runtime.open(EngineConfig(backend="cpu", cpu_workers=1, cpu_parallelism="thread"))
    try:
        with running(eng, udp_port=None, quic_port=None) as ing:
            async def main():
                async with connect("tcp", LOCAL, ing.ports["tcp"]) as s:
                    return await asyncio.gather(await s.submit(catalogue[0].frame), return_exceptions=True)

            (err,) = run(main())
            # The drop is counted once the reply is written (worker._finish), which can be just
            # after the client has read it.
            deadline = time.monotonic() + 5
            while (st := ing.status()["transports"]["tcp"])["dropped"]["not_ready"] < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        eng.close()
    assert isinstance(err, RemoteError) and err.code == "NOT_READY" and st["dropped"]["not_ready"] == 1


def test_receipts_are_written_per_frame_with_its_root(engine_p, catalogue, tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'r.sqlite3'}")
    try:
        with running(engine_p, store=store, udp_port=None, quic_port=None) as ing:
            results = run(drive("tcp", ing.ports["tcp"], catalogue, list(range(len(catalogue))) * 3))
        receipts = store.page(limit=1000)
    finally:
        store.close()
    assert len(receipts) == len(results)
    assert sorted(r.merkle_root for r in receipts) == sorted(catalogue[i].root for i, _ in results)
    assert {r.source for r in receipts} == {"tcp"}


def test_the_wire_doc_names_every_drop_reason():
    """docs/wire-format.md lists the drop reasons /v1/status reports."""
    from pathlib import Path

    from app.engine.ingest.counters import DROP_REASONS

    doc = (Path(__file__).resolve().parent.parent / "docs" / "wire-format.md").read_text()
    assert [r for r in DROP_REASONS if f"`{r}`" not in doc] == []


def test_the_next_batch_verifies_while_the_last_one_commits(engine_p, catalogue, tmp_path):
    """Receipts are off the verify path: with the store's commit held, the worker goes on
    verifying later frames; none of them is answered before its own receipt is written."""
    store = open_store(f"sqlite:///{tmp_path / 'r.sqlite3'}")
    gate = threading.Event()
    held = threading.Event()
    real = store.group_commit.insert

    def slow_insert(rows):
        held.set()
        gate.wait(10)
        real(rows)

    store.group_commit.insert = slow_insert
    verified = []
    real_verify = engine_p.engine.run

    def counting_verify(batch):
        verified.append(len(batch))
        return real_verify(batch)

    engine_p.engine.run = counting_verify
    try:
        with running(engine_p, store=store, udp_port=None, quic_port=None, coalesce_items=1) as ing:
            async def go():
                async with connect("tcp", LOCAL, ing.ports["tcp"], max_in_flight=8) as s:
                    futures = [await s.submit(catalogue[i].frame) for i in range(4)]
                    assert await asyncio.to_thread(held.wait, 10)
                    deadline = time.monotonic() + 10
                    while len(verified) < 4 and time.monotonic() < deadline:  # the worker is not waiting
                        await asyncio.sleep(0.01)
                    assert len(verified) == 4 and store.count() == 0
                    assert not any(f.done() for f in futures)  # nothing answered before its receipt
                    gate.set()
                    return [await f for f in futures]

            results = run(go())
        for i, r in enumerate(results):
            catalogue[i].check(r)
        assert store.count() == 4
    finally:
        gate.set()
        del engine_p.engine.run
        store.close()
