"""The receipt store: one suite, run against SQLite always and against PostgreSQL when
``ZAPVERIFY_TEST_POSTGRES_URL`` names a server (``scripts/pg_test_cluster`` starts one).

Each PostgreSQL test gets a schema of its own (the ``pg_schema`` fixture of conftest.py).
"""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from app.core.errors import ConfigError, RequestError, StoreSchemaTooNew, StoreUnavailable
from app.engine.commit import merkle
from app.engine.receipts.ids import new_batch_id
from app.engine.receipts.open import open_store
from app.engine.receipts.pruner import Pruner
from app.engine.receipts.store import MAX_PAGE, Receipt, ReceiptStore


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'receipts.sqlite3'}"
    return request.getfixturevalue("pg_schema")


@pytest.fixture
def store(store_url):
    s = open_store(store_url)
    yield s
    s.close()


def make_receipt(rng: random.Random, n: int | None = None, *, created_at: datetime | None = None,
                 source: str = "http", request_id: str | None = None) -> Receipt:
    n = n or rng.randrange(1, 70)
    verdicts = np.array([rng.random() < 0.8 for _ in range(n)])
    leaves = np.frombuffer(rng.randbytes(32 * n), np.uint8).reshape(n, 32)
    return Receipt.build(verdicts=verdicts, leaves=leaves, merkle_root=merkle.root(leaves),
                         schemes=rng.sample(["ed25519", "secp256k1", "ml-dsa-44"], rng.randrange(1, 4)),
                         backends={"ed25519": "cpu"}, duration_seconds=rng.random(), source=source,
                         created_at=created_at, request_id=request_id)


# ------------------------------------------------------------------ basics
def test_put_get_round_trip(store: ReceiptStore):
    rng = random.Random(1)
    for n in (1, 7, 8, 9, 1000):
        r = make_receipt(rng, n, source="quic")
        store.put(r)
        got = store.get(r.id)
        assert got == r
        assert got.created_at == r.created_at and got.created_at.tzinfo is not None
        assert np.array_equal(got.verdicts(), r.verdicts())
        assert got.leaf_array().shape == (n, 32)
        slim = store.get(r.id, leaves=False)
        assert slim.leaves is None and slim.merkle_root == r.merkle_root and slim.count == n


def test_put_many_writes_all_or_none(store):
    rng = random.Random(8)
    batch = [make_receipt(rng, source=src) for src in ("tcp", "udp", "quic")]
    store.put_many(batch)
    assert [store.get(r.id).merkle_root for r in batch] == [r.merkle_root for r in batch]
    again = [make_receipt(rng), batch[1]]  # the second repeats an id: the first must not land either
    with pytest.raises(StoreUnavailable):
        store.put_many(again)
    assert store.get(again[0].id) is None and store.count() == 3


def test_unknown_id_is_none(store):
    assert store.get(new_batch_id()) is None


def test_proof_from_stored_receipt_verifies(store):
    r = make_receipt(random.Random(2), 300)
    store.put(r)
    got = store.get(r.id)
    for i in (0, 1, 150, 299):
        p = got.proof(i)
        assert merkle.verify_inclusion(r.merkle_root, r.leaf(i), i, 300, p.audit_path)
        assert p.verdict == bool(r.verdicts()[i])


def test_repeated_id_is_a_failed_write(store):
    r = make_receipt(random.Random(3))
    store.put(r)
    with pytest.raises(StoreUnavailable) as e:
        store.put(r)
    assert e.value.status == 503 and e.value.code == "STORE_UNAVAILABLE"
    assert store.count() == 1


def test_write_after_close_fails_with_store_unavailable(store_url):
    s = open_store(store_url)
    s.close()
    with pytest.raises(StoreUnavailable):
        s.put(make_receipt(random.Random(4)))


def test_concurrent_writers_all_land(store):
    rng = random.Random(5)
    receipts = [make_receipt(rng, 5) for _ in range(60)]
    errors = []

    def write(part):
        try:
            for r in part:
                store.put(r)
        except Exception as exc:  # reported below: a lost write is the failure
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(receipts[k::4],)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.count() == 60
    assert all(store.get(r.id) == r for r in receipts)


def test_concurrent_writers_share_transactions_group_commit(store):
    """Receipts put while a commit is running wait and go together in the next transaction
    (one fsync for all), each caller returning only once its own receipts are committed."""
    rng = random.Random(6)
    receipts = [make_receipt(rng, 3) for _ in range(40)]
    gc = store.group_commit
    real, seen = gc.insert, []

    def slow_insert(rows):
        seen.append(len(rows))
        time.sleep(0.02)  # a commit long enough for the other writers to queue behind it
        real(rows)

    gc.insert = slow_insert
    start = threading.Barrier(8)

    def write(part):
        start.wait()
        for r in part:
            store.put(r)
            assert store.get(r.id, leaves=False) is not None  # committed when put returns

    threads = [threading.Thread(target=write, args=(receipts[k::8],)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.count() == 40 and sum(seen) == 40
    assert len(seen) < 40 and max(seen) > 1  # joined: fewer transactions than writes
    assert gc.callers == 40 and gc.groups == len(seen)


def test_a_failed_group_commit_fails_every_caller_in_it(store):
    gc = store.group_commit
    gate, entered = threading.Event(), threading.Event()
    real = gc.insert

    def insert(rows):
        if len(rows) == 1 and not gate.is_set():  # the first writer's own commit: hold it
            entered.set()
            gate.wait(5)
            return real(rows)
        raise StoreUnavailable("disk full")

    gc.insert = insert
    rng = random.Random(7)
    outcomes: dict[int, str] = {}

    def write(k):
        try:
            store.put(make_receipt(rng, 2))
            outcomes[k] = "ok"
        except StoreUnavailable as exc:
            outcomes[k] = str(exc)

    first = threading.Thread(target=write, args=(0,))
    first.start()
    entered.wait(5)
    rest = [threading.Thread(target=write, args=(k,)) for k in (1, 2, 3)]
    for t in rest:
        t.start()
    time.sleep(0.1)  # all three queued behind the first commit
    gate.set()
    for t in [first, *rest]:
        t.join()
    assert outcomes == {0: "ok", 1: "disk full", 2: "disk full", 3: "disk full"}
    assert store.count() == 1


# ------------------------------------------------------------------ paging
def test_keyset_paging_walks_every_receipt_once_in_id_order(store):
    rng = random.Random(6)
    ids = []
    for _ in range(25):
        r = make_receipt(rng, 3)
        store.put(r)
        ids.append(r.id)
    assert ids == sorted(ids)  # UUIDv7: time order is id order
    seen, after = [], None
    while True:
        page = store.page(after, 10)
        seen += [r.id for r in page]
        assert all(r.leaves is None for r in page)
        if len(page) < 10:
            break
        after = page[-1].id
    assert seen == ids
    assert [r.id for r in store.page(ids[19], 100)] == ids[20:]
    assert store.page(ids[-1], 5) == []


def test_keyset_paging_newest_first_walks_every_receipt_once_in_reverse(store):
    rng = random.Random(16)
    ids = []
    for _ in range(25):
        r = make_receipt(rng, 12)
        store.put(r)
        ids.append(r.id)
    store.add_shadow_mismatches(ids[3], [5, 1])
    assert [r.id for r in store.page(None, 1, order="desc")] == [ids[-1]]  # the newest, in one call
    seen, after = [], None
    while True:
        page = store.page(after, 10, order="desc")
        seen += [r.id for r in page]
        assert all(r.leaves is None for r in page)
        if len(page) < 10:
            break
        after = page[-1].id
    assert seen == ids[::-1]
    assert [r.id for r in store.page(ids[5], 100, order="desc")] == ids[4::-1]
    assert {r.id: r.shadow_mismatches for r in store.page(ids[5], 100, order="desc")}[ids[3]] == (1, 5)
    assert store.page(ids[0], 5, order="desc") == []
    assert [r.id for r in store.page(ids[5], 3, order="asc")] == ids[6:9]  # asc is the default's order
    with pytest.raises(RequestError) as e:
        store.page(None, 5, order="newest")
    assert e.value.field == "order"


@pytest.mark.parametrize("limit", [0, -1, MAX_PAGE + 1])
def test_page_limit_out_of_range_names_the_field(store, limit):
    with pytest.raises(RequestError) as e:
        store.page(None, limit)
    assert e.value.field == "limit"


# ------------------------------------------------------------------ retention
def test_prune_by_age(store):
    rng = random.Random(7)
    now = datetime.now(UTC)
    store.prune_chunk = 2
    old = [make_receipt(rng, 2, created_at=now - timedelta(days=10, seconds=k)) for k in range(5)]
    new = [make_receipt(rng, 2, created_at=now - timedelta(hours=1)) for _ in range(4)]
    for r in old + new:
        store.put(r)
    assert store.prune(max_age_seconds=86400, now=now) == 5
    assert store.count() == 4
    assert all(store.get(r.id) is None for r in old) and all(store.get(r.id) for r in new)
    assert store.prune(max_age_seconds=86400, now=now) == 0


def test_prune_by_rows_keeps_the_newest(store):
    store.prune_chunk = 4  # several chunks per prune
    rng = random.Random(8)
    rs = [make_receipt(rng, 1) for _ in range(23)]
    for r in rs:
        store.put(r)
    assert store.prune(max_rows=100) == 0
    assert store.prune(max_rows=5) == 18
    assert [r.id for r in store.page(None, 100)] == [r.id for r in rs[-5:]]
    assert store.prune(max_rows=5) == 0


def test_pruner_thread_applies_limits_and_stops(store):
    rng = random.Random(9)
    for _ in range(12):
        store.put(make_receipt(rng, 1))
    pruner = Pruner(store, max_rows=3, interval_seconds=0.05)
    pruner.start()
    try:
        assert pruner.wait_for_runs(2, timeout=30)
    finally:
        pruner.stop()
    assert pruner.pruned_total == 9 and store.count() == 3
    assert pruner._thread is None


def test_pruner_without_limits_does_not_start(store):
    p = Pruner(store, interval_seconds=0.01)
    p.start()
    assert p._thread is None and not p.enabled
    p.stop()


# ------------------------------------------------------------------ schema
def _latest(store_url: str) -> int:
    from app.engine.receipts import postgres, sqlite

    return len(sqlite.MIGRATIONS if store_url.startswith("sqlite") else postgres.MIGRATIONS)


def test_schema_is_created_and_reopening_is_idempotent(store_url):
    latest = _latest(store_url)
    assert latest == 3  # 1: receipts; 2: shadow_mismatches; 3: request_id
    with open_store(store_url) as s:
        assert s.schema_version() == latest
        r = make_receipt(random.Random(10))
        s.put(r)
    with open_store(store_url) as s:
        assert s.schema_version() == latest and s.get(r.id) == r


def test_migration_to_a_later_version_runs_once(store_url):
    from app.engine.receipts import postgres, sqlite

    kind = store_url.split(":", 1)[0]
    latest = _latest(store_url)
    with open_store(store_url) as s:
        r = make_receipt(random.Random(11))
        s.put(r)
    if kind == "sqlite":
        cls, base = sqlite.SqliteStore, sqlite.MIGRATIONS
        later = base + (("ALTER TABLE receipts ADD COLUMN note TEXT",),)
        open_later = lambda: cls(store_url[len("sqlite:///"):], migrations=later)  # noqa: E731
    else:
        cls, base = postgres.PostgresStore, postgres.MIGRATIONS
        later = base + (("ALTER TABLE receipts ADD COLUMN note text",),)
        open_later = lambda: cls(store_url, migrations=later)  # noqa: E731
    with open_later() as s:
        assert s.schema_version() == latest + 1
        assert s.get(r.id) == r  # existing rows survive the migration
    with open_later() as s:  # already there: nothing re-applied (ADD COLUMN twice would fail)
        assert s.schema_version() == latest + 1
    with pytest.raises(StoreSchemaTooNew) as e:  # this build knows only up to latest
        open_store(store_url)
    assert e.value.code == "STORE_SCHEMA_TOO_NEW" and e.value.status == 503


def test_a_version_1_database_is_migrated_to_the_latest(tmp_path):
    import sqlite3

    from app.engine.receipts import sqlite
    from app.engine.receipts.store import COLUMNS, receipt_row

    path = tmp_path / "v1.db"
    with sqlite.SqliteStore(path, migrations=sqlite.MIGRATIONS[:1]):
        pass
    r = make_receipt(random.Random(12), 5)
    old = COLUMNS[:COLUMNS.index("request_id")]  # a row as version 1 wrote it
    with sqlite3.connect(path) as db:
        db.execute(f"INSERT INTO receipts ({', '.join(old)}) VALUES ({', '.join('?' * len(old))})",
                   receipt_row(r)[:len(old)])
    with open_store(f"sqlite:///{path}") as s:
        assert s.schema_version() == 3 and s.get(r.id) == r and s.get(r.id).shadow_mismatches == ()
        assert s.get(r.id).request_id is None
        assert s.add_shadow_mismatches(r.id, [4]) == 1 and s.get(r.id).shadow_mismatches == (4,)


def test_the_request_id_round_trips(store: ReceiptStore):
    rng = random.Random(14)
    a, b = make_receipt(rng, 3, request_id="client-req-1"), make_receipt(rng, 2)
    store.put_many([a, b])
    assert store.get(a.id).request_id == "client-req-1" and store.get(b.id).request_id is None
    assert {r.id: r.request_id for r in store.page(limit=10)} == {a.id: "client-req-1", b.id: None}


# ------------------------------------------------------------------ shadow mismatches
def test_shadow_mismatches_are_recorded_once_listed_and_pruned_with_their_receipt(store):
    rng = random.Random(13)
    a, b = make_receipt(rng, 10), make_receipt(rng, 3)
    store.put_many([a, b])
    assert store.get(a.id).shadow_mismatches == () and store.get(a.id).to_json()["shadow_mismatches"] == []
    assert store.add_shadow_mismatches(a.id, [7, 2]) == 2
    assert store.add_shadow_mismatches(a.id, [2, 9]) == 1  # 2 was there: kept once
    got = store.get(a.id)
    assert got.shadow_mismatches == (2, 7, 9) and got.to_json()["shadow_mismatches"] == [2, 7, 9]
    assert store.get(a.id, leaves=False).shadow_mismatches == (2, 7, 9)
    assert {r.id: r.shadow_mismatches for r in store.page()} == {a.id: (2, 7, 9), b.id: ()}
    with pytest.raises(ValueError):
        store.add_shadow_mismatches(b.id, [3])  # b has 3 items: 0..2
    from app.core.errors import ReceiptNotFound

    with pytest.raises(ReceiptNotFound):
        store.add_shadow_mismatches(new_batch_id(), [0])
    assert store.delete_beyond_newest(1) == 1  # a is the older: deleted, its mismatch rows with it
    store.put(Receipt(**{**{f: getattr(a, f) for f in a.__dataclass_fields__}, "shadow_mismatches": ()}))
    assert store.get(a.id).shadow_mismatches == ()  # the same id again starts clean


def test_ping(store):
    store.ping()


# ------------------------------------------------------------------ per-backend details
def test_sqlite_is_wal_with_full_sync(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'x' / 'r.db'}") as s:
        assert s.kind == "sqlite"
        assert s.pragma("journal_mode") == "wal"
        assert s.pragma("synchronous") == 2  # FULL
        assert s.pragma("page_size") == 65536  # a batch's leaf hashes in few pages


def test_sqlite_unwritable_path_is_store_unavailable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreUnavailable):
        open_store(f"sqlite:///{blocker / 'receipts.sqlite3'}")


@pytest.mark.parametrize("url", ["mysql://x/y", "sqlite:/x", "sqlite://", "receipts.db"])
def test_unknown_url_is_a_config_error(url):
    with pytest.raises(ConfigError) as e:
        open_store(url)
    assert e.value.field == "database_url"


def test_postgres_unreachable_is_store_unavailable():
    pytest.importorskip("psycopg_pool")
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from app.engine.receipts.postgres import PostgresStore

    with pytest.raises(StoreUnavailable):
        PostgresStore(f"postgresql://nobody:secret@127.0.0.1:{port}/x?connect_timeout=2", connect_timeout=2)


def test_postgres_url_password_is_redacted():
    from app.engine.receipts.postgres import redact

    assert redact("postgresql://u:pw@h:5432/db?x=1") == "postgresql://u:***@h:5432/db?x=1"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"


def test_postgres_kind(pg_schema):
    with open_store(pg_schema) as s:
        assert s.kind == "postgresql"


def test_receipt_rejects_inconsistent_fields():
    r = make_receipt(random.Random(12), 9)
    from dataclasses import replace

    with pytest.raises(ValueError):
        replace(r, valid=r.valid + 1)
    with pytest.raises(ValueError):
        replace(r, verdict_bitmap=r.verdict_bitmap + b"\x00")
    with pytest.raises(ValueError):
        replace(r, source="carrier-pigeon")
    with pytest.raises(ValueError):
        replace(r, leaves=r.leaves[:-1])
