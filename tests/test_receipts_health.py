"""A receipt store fault is visible and cheap (issue 37): a full disk or an unreachable
PostgreSQL turns /readyz to 503 with the reason, verify requests fail at once with 503
``STORE_UNAVAILABLE`` and ``Retry-After``, ``zapverify_receipt_store_up`` is 0, and all of it
recovers without a restart.  SQLite's write-ahead log stays bounded.

A full disk is simulated with ``PRAGMA max_page_count`` (SQLite then answers SQLITE_FULL,
as it does for ENOSPC); PostgreSQL going away with a TCP proxy in front of the test
cluster that is closed and reopened (the cluster itself is shared).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time

import nacl.signing
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.core.errors import StoreUnavailable
from app.engine.receipts.open import open_store
from app.engine.receipts.sqlite import WAL_SIZE_LIMIT, SqliteStore
from app.engine.runtime import Runtime
from app.engine.verify.engine import Engine
from app.main import create_app
from tests.test_receipts_store import make_receipt


def fill(store: SqliteStore) -> StoreUnavailable:
    """Make the SQLite database "full" (no page beyond the ones it has) and write until a
    write fails; returns that failure."""
    with store._lock:
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count={pages}")
    rng = random.Random(1)
    for _ in range(200):
        try:
            store.put(make_receipt(rng, 1500))  # 48 KB of leaf hashes: new pages soon
        except StoreUnavailable as exc:
            return exc
    raise AssertionError("the database never filled")


def unfill(store: SqliteStore) -> None:
    with store._lock:
        store._db.execute("PRAGMA max_page_count=1000000")


# ------------------------------------------------------------------ the store layer
def test_sqlite_full_disk_marks_the_store_down_refuses_fast_and_recovers(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="zapverify.store")
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        assert isinstance(store, SqliteStore) and store.health.up
        err = fill(store)
        # The error says what is wrong (it read "cannot rollback - no transaction is active").
        assert err.reason == "disk_full" and "disk" in err.message and "full" in err.message
        assert "cannot rollback" not in err.message and err.retry_after == 1.0
        assert not store.health.up and store.health.snapshot()["reason"] == "disk_full"

        calls = []
        real = store.group_commit.insert
        store.group_commit.insert = lambda rows: (calls.append(len(rows)), real(rows))[1]
        t0 = time.monotonic()
        for _ in range(20):
            with pytest.raises(StoreUnavailable) as e:
                store.put(make_receipt(random.Random(2), 3))
            assert e.value.reason == "disk_full" and e.value.retry_after == 1.0
        assert time.monotonic() - t0 < 0.5 and calls == []  # refused without touching the database
        assert store.count() >= 1  # reads still work on a full disk
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "disk_full" in errors[0].getMessage()  # once, not per request

        unfill(store)
        deadline = time.monotonic() + 5
        while True:  # the next probe (at most one a second) finds it writable again
            try:
                store.put(make_receipt(random.Random(3), 3))
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "the store did not recover"
                time.sleep(0.1)
        assert store.health.up and calls == [1]
        assert any(r.levelno == logging.WARNING and "recovered" in r.getMessage() for r in caplog.records)
        assert store.health.failures["disk_full"] >= 1


def test_a_repeated_id_does_not_mark_the_store_down(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        r = make_receipt(random.Random(4), 2)
        store.put(r)
        with pytest.raises(StoreUnavailable):
            store.put(r)
        assert store.health.up  # the request's fault, not the store's


def test_sqlite_wal_stays_bounded_after_many_small_commits(tmp_path):
    # ~3 pages of 64 KiB per small commit: with SQLite's default checkpoint every 1000 pages
    # the log grew to 64 MB, and to ~40 MB after these 200 commits.
    path = tmp_path / "r.db"
    with open_store(f"sqlite:///{path}") as store:
        assert store.pragma("journal_size_limit") == WAL_SIZE_LIMIT
        rng = random.Random(5)
        high = 0
        for _ in range(200):
            store.put(make_receipt(rng, 2))
            high = max(high, os.path.getsize(f"{path}-wal"))
        assert high <= WAL_SIZE_LIMIT + (1 << 20), high
        assert store.count() == 200


# ------------------------------------------------------------------ through the app
def _items(n: int) -> dict:
    sk = nacl.signing.SigningKey(b"\x07" * 32)
    pk = sk.verify_key.encode().hex()
    return {"items": [{"scheme": "ed25519", "public_key": pk, "message": f"{i}".encode().hex(),
                       "signature": sk.sign(f"{i}".encode()).signature.hex()} for i in range(n)]}


@pytest.fixture
def make_client(tmp_path):
    clients = []

    def make(**settings):
        engine = Engine()
        engine.start()
        client = TestClient(create_app(Settings(data_dir=tmp_path, instance="t", **settings), runtime=Runtime(engine)))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def _wait_status(client, path: str, status: int, within: float):
    deadline = time.monotonic() + within
    while (r := client.get(path)).status_code != status:
        assert time.monotonic() < deadline, f"{path} still {r.status_code} after {within} s: {r.text}"
        time.sleep(0.1)
    return r


def test_full_disk_turns_readyz_503_verify_fails_fast_with_retry_after_and_recovers(make_client):
    client = make_client()
    assert client.get("/readyz").json()["store"]["up"] is True
    store = client.app.state.runtime.store
    fill(store)
    ready = client.get("/readyz")
    assert ready.status_code == 503
    body = ready.json()
    assert body["ready"] is False and body["store"]["up"] is False and body["store"]["reason"] == "disk_full"
    assert "full" in body["store"]["message"]

    t0 = time.monotonic()
    r = client.post("/v1/verify", json=_items(3))
    assert time.monotonic() - t0 < 2
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    err = r.json()["error"]
    assert err["code"] == "STORE_UNAVAILABLE" and "disk" in err["message"] and "full" in err["message"]

    metrics = client.get("/metrics").text
    assert "zapverify_receipt_store_up 0.0" in metrics
    assert 'zapverify_receipt_store_failures_total{reason="disk_full"}' in metrics

    unfill(store)
    _wait_status(client, "/readyz", 200, within=5)
    assert client.post("/v1/verify", json=_items(3)).status_code == 200
    assert "zapverify_receipt_store_up 1.0" in client.get("/metrics").text


def test_a_store_fault_shows_its_path_to_admins_only(make_client, tmp_path):
    """The open /readyz and a verify 503 say what is wrong in words with a reason code; the
    database file's path and SQLite's own words are in the log and /v1/status (admin) only."""
    client = make_client()
    fill(client.app.state.runtime.store)
    path = str(tmp_path)
    ready = client.get("/readyz")
    assert ready.status_code == 503 and path not in ready.text and "database or disk" not in ready.text
    assert ready.json()["store"]["message"] == "the disk of the receipt store is full"
    r = client.post("/v1/verify", json=_items(2))
    assert r.status_code == 503 and path not in r.text
    assert r.json()["error"] == {"code": "STORE_UNAVAILABLE", "reason": "disk_full",
                                 "message": "the disk of the receipt store is full; retry in 1 s"}
    zap = client.post("/v1/verify/zap", content=_zap_frame(), headers={"content-type": "application/x-zap"})
    assert zap.status_code == 503 and path.encode() not in zap.content
    store = client.get("/v1/status").json()["store"]
    assert store["kind"] == "sqlite" and store["reason"] == "disk_full" and path in store["url"]
    assert path in store["detail"] and "database or disk is full" in store["detail"]


def _zap_frame() -> bytes:
    from app.wire import zap

    items = _items(2)["items"]
    cols = [[bytes.fromhex(i[f]) for i in items] for f in ("public_key", "message", "signature")]
    return bytes(zap.encode_items("ed25519", *cols, request_id=1))


# ------------------------------------------------------------------ PostgreSQL going away
class Proxy:
    """A TCP proxy on a loopback port to ``target``; :meth:`down` closes the listener and every
    connection through it (as a stopped server does), :meth:`up` listens again on the same port."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = 0
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.up()

    def up(self) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.port))
        self.port = self._listener.getsockname()[1]
        self._listener.listen(16)
        self._open = True
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            self._open = False
            try:  # wakes the accept() of the other thread (a bare close() does not)
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self._conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                if not self._open:
                    client.close()
                    return
                server = socket.create_connection(self.target)
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_postgres_unreachable_turns_readyz_503_verify_fails_fast_and_recovers(make_client, pg_schema):
    from urllib.parse import urlsplit

    parts = urlsplit(pg_schema)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    try:
        url = parts._replace(netloc=parts.netloc.replace(f":{parts.port}", f":{proxy.port}")).geturl()
        client = make_client(database_url=url)
        assert client.post("/v1/verify", json=_items(2)).status_code == 200
        assert client.get("/readyz").status_code == 200

        proxy.down()
        t_down = time.monotonic()
        body = _wait_status(client, "/readyz", 503, within=5).json()
        assert time.monotonic() - t_down < 5
        assert body["store"]["reason"] == "unreachable"

        t0 = time.monotonic()
        r = client.post("/v1/verify", json=_items(2))
        assert time.monotonic() - t0 < 1.5  # was the pool's 10 s connect timeout per request
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "STORE_UNAVAILABLE"
        assert r.json()["error"]["reason"] == "unreachable"
        assert "cannot be reached" in r.json()["error"]["message"]
        # Neither the open /readyz nor a client's 503 shows the database's user, host, port or
        # URL (issue 53); the admin-scoped status does.
        ready = client.get("/readyz")
        for leaked in (str(proxy.port), "postgresql://", parts.hostname or "127.0.0.1", parts.username or "postgres"):
            assert leaked not in ready.text and leaked not in r.text, leaked
        store = client.get("/v1/status").json()["store"]
        assert store["kind"] == "postgresql" and str(proxy.port) in store["url"]
        assert store["reason"] == "unreachable" and str(proxy.port) in store["detail"]

        proxy.up()
        _wait_status(client, "/readyz", 200, within=20)
        assert client.post("/v1/verify", json=_items(2)).status_code == 200
    finally:
        proxy.down()


def test_writers_queued_behind_a_failed_group_learn_the_store_is_down_without_trying_it():
    """PostgreSQL stopped: the first group waits out the pool's timeout; the groups queued
    behind it must be refused by the health gate at once, not each wait again."""
    import threading

    from app.core.errors import StoreUnavailable
    from app.engine.receipts.group_commit import GroupCommit

    down = threading.Event()
    inserts: list[int] = []
    first_started = threading.Event()

    def insert(rows):
        inserts.append(len(rows))
        first_started.set()
        time.sleep(0.5)  # the pool's wait for a connection
        down.set()
        raise StoreUnavailable("the receipt store's database cannot be reached", reason="unreachable")

    def gate():
        if down.is_set():
            raise StoreUnavailable("the receipt store's database cannot be reached", reason="unreachable")

    gc = GroupCommit(insert, gate=gate)
    took: list[float] = []

    def writer(k):
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable):
            gc.write([(k,)])
        took.append(time.monotonic() - t0)

    first = threading.Thread(target=writer, args=(0,))
    first.start()
    first_started.wait(5)
    rest = [threading.Thread(target=writer, args=(k,)) for k in range(1, 6)]
    for t in rest:
        t.start()
    for t in [first, *rest]:
        t.join(10)
    assert inserts == [1]  # the queued writers never reached the store
    assert len(took) == 6 and max(took) < 1.5
