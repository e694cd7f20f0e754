"""The embedded receipt store: one SQLite file, WAL journal, ``synchronous=FULL``.

With WAL and ``synchronous=FULL`` every commit is fsync'ed to the write-ahead log before
:meth:`SqliteStore.put` returns, so a receipt whose response was sent survives the process
being killed or the machine losing power (SQLite's "Write-Ahead Logging" and ``PRAGMA
synchronous`` documentation).  One connection, serialised by a lock: the writes are bound
by that fsync anyway, and reads are single indexed lookups.

The write-ahead log is bounded (:data:`WAL_SIZE_LIMIT`, :data:`WAL_CHECKPOINT_BYTES`) and a
failed write names its cause (``SQLITE_FULL`` is ``disk_full``; app/engine/receipts/health.py).
"""

from __future__ import annotations

import errno
import sqlite3
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from app.core.errors import StoreUnavailable
from app.engine.receipts.health import Fault
from app.engine.receipts.store import (
    COLUMNS,
    MAX_PAGE,
    SHADOW_TABLE,
    Receipt,
    ReceiptStore,
    check_limit,
    check_order,
    check_schema_version,
    receipt_from_row,
    to_micros,
)

#: Schema migrations; version v is ``MIGRATIONS[v - 1]``, applied in one transaction each.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE receipts (
               id               TEXT PRIMARY KEY,
               created_us       INTEGER NOT NULL,
               schemes          TEXT NOT NULL,
               item_count       INTEGER NOT NULL CHECK (item_count >= 1),
               valid_count      INTEGER NOT NULL CHECK (valid_count BETWEEN 0 AND item_count),
               merkle_root      BLOB NOT NULL CHECK (length(merkle_root) = 32),
               verdict_bitmap   BLOB NOT NULL,
               leaves           BLOB NOT NULL,
               backends         TEXT NOT NULL,
               duration_seconds REAL NOT NULL,
               source           TEXT NOT NULL
           )""",
        "CREATE INDEX receipts_created_us ON receipts (created_us)",
    ),
    (
        # Version 2: items a shadow check found wrong after their receipt was written
        # (app/engine/verify/shadow.py); deleted with their receipt.
        """CREATE TABLE shadow_mismatches (
               receipt_id TEXT NOT NULL REFERENCES receipts (id) ON DELETE CASCADE,
               item_index INTEGER NOT NULL CHECK (item_index >= 0),
               found_us   INTEGER NOT NULL,
               PRIMARY KEY (receipt_id, item_index)
           ) WITHOUT ROWID""",
    ),
    # Version 3: the id of the request that carried the batch (X-Request-ID; app/logs.py).
    ("ALTER TABLE receipts ADD COLUMN request_id TEXT",),
)

#: Most bytes the write-ahead log file keeps after a checkpoint (``PRAGMA journal_size_limit``).
#: SQLite reuses the WAL file rather than truncating it, so without a limit it keeps the
#: size of its largest run between checkpoints, and on a full disk freed space went back
#: to the log; 8 MiB holds a few of the largest (65536-item, 2 MiB) receipts.
WAL_SIZE_LIMIT = 8 << 20
#: WAL bytes after which a commit checkpoints (``PRAGMA wal_autocheckpoint``, set in pages).
#: SQLite's default is 1000 pages: 64 MB with the 64 KiB pages used here, where a small
#: commit writes about three pages (~190 KB) of log.
WAL_CHECKPOINT_BYTES = 4 << 20
#: Table the write probe of a store found full allocates pages in and empties again (not
#: part of the versioned schema: it holds no data, so older builds may ignore it).
PROBE_TABLE = "zapverify_store_probe"
#: Pages the write probe allocates: a receipt write needs new pages too, so a probe that
#: needs none would find a full database "recovered".
PROBE_PAGES = 4

_SQLITE_FULL, _SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_BUSY, _SQLITE_LOCKED = 13, 8, 10, 5, 6

_COLS = ", ".join(COLUMNS)
_COLS_NO_LEAVES = ", ".join("NULL" if c == "leaves" else c for c in COLUMNS)


class SqliteStore(ReceiptStore):
    """Receipts in the SQLite database at ``path`` (``":memory:"`` for a throwaway one).

    The parent directory is created.  Raises :class:`StoreUnavailable` when the file
    cannot be opened and :class:`app.core.errors.StoreSchemaTooNew` when it was migrated by a
    newer zapverify.
    """

    kind = "sqlite"

    def __init__(self, path: str | Path, *, migrations: tuple[tuple[str, ...], ...] = MIGRATIONS,
                 busy_timeout_seconds: float = 10.0):
        super().__init__()
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        self._migrations = migrations
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are begun and ended explicitly below.
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                       timeout=busy_timeout_seconds)
            # 64 KiB pages (takes effect only while the file is new): a receipt carries 32 bytes
            # of leaf hash per item, 2 MiB for a 65536-item batch, which 4 KiB pages chain
            # over 512 overflow pages; 64 KiB pages wrote such batches 1.8x faster here
            # (bench/results/host_path.md).
            self._db.execute("PRAGMA page_size=65536")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            # Bound the write-ahead log (WAL_SIZE_LIMIT, WAL_CHECKPOINT_BYTES): a full disk is
            # then recoverable by freeing space, not refilled by the log's growth.
            self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT:d}")
            self.page_size = int(self._db.execute("PRAGMA page_size").fetchone()[0])
            self._db.execute(f"PRAGMA wal_autocheckpoint={max(16, WAL_CHECKPOINT_BYTES // self.page_size):d}")
            # Off by default in SQLite; shadow_mismatches rows go with their receipt when pruned.
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {PROBE_TABLE} (b BLOB NOT NULL)")
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"cannot open SQLite receipt store {self.path}: {exc}") from exc

    # ------------------------------------------------------------------ schema
    def _migrate(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")  # one process migrates; others wait on the write lock
        try:
            db.execute("CREATE TABLE IF NOT EXISTS zapverify_schema_migrations ("
                       "version INTEGER PRIMARY KEY, applied_us INTEGER NOT NULL)")
            found = db.execute("SELECT coalesce(max(version), 0) FROM zapverify_schema_migrations"
                               ).fetchone()[0]
            check_schema_version(found, len(self._migrations), self.url)
            for version in range(found + 1, len(self._migrations) + 1):
                for stmt in self._migrations[version - 1]:
                    db.execute(stmt)
                db.execute("INSERT INTO zapverify_schema_migrations VALUES (?, ?)",
                           (version, time.time_ns() // 1000))
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    def schema_version(self) -> int:
        return self._read_one("SELECT max(version) FROM zapverify_schema_migrations")

    def pragma(self, name: str) -> object:
        """The value of ``PRAGMA name`` (tests check ``journal_mode`` and ``synchronous``)."""
        return self._read_one(f"PRAGMA {name}")

    # ------------------------------------------------------------------ health
    def _classify(self, exc: BaseException) -> Fault | None:
        if isinstance(exc, OSError):
            return Fault("disk_full" if exc.errno == errno.ENOSPC else "io_error", str(exc))
        if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)):
            return None  # a repeated id, or the store was closed: not the database failing
        if not isinstance(exc, sqlite3.Error):
            return None
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF  # the primary result code
        if code == _SQLITE_FULL or "database or disk is full" in str(exc):
            return Fault("disk_full", f"{self.path}: {exc}")
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return None  # another process holds the write lock: contention, not a fault
        if code == _SQLITE_READONLY:
            return Fault("read_only", f"{self.path}: {exc}")
        if code == _SQLITE_IOERR:
            return Fault("io_error", f"{self.path}: {exc}")
        return Fault("write_failed", f"{self.path}: {exc}")

    def _probe(self, down_reason: str | None) -> None:
        with self._lock:
            if down_reason is None:
                self._db.execute("SELECT 1").fetchone()
                return
            # Down after a failed write: only a write tells whether it would work now.  Pages
            # are allocated (a full database refuses them) and the commit appends to the WAL
            # (a full disk refuses that), then the rows are gone again.
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(f"INSERT INTO {PROBE_TABLE} VALUES (zeroblob(?))", (PROBE_PAGES * self.page_size,))
                db.execute(f"DELETE FROM {PROBE_TABLE}")
                db.execute("COMMIT")
            except BaseException:
                _rollback(db)
                raise

    # ------------------------------------------------------------------ access
    def _read_one(self, sql: str, args: tuple = ()) -> Any:
        try:
            with self._lock:
                row = self._db.execute(sql, args).fetchone()
        except sqlite3.Error as exc:
            raise self._failure(exc, "read") from exc
        return None if row is None else row[0]

    def _write(self, sql: str, args: tuple | list = (), many: bool = False) -> int:
        try:
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    n = (self._db.executemany if many else self._db.execute)(sql, args).rowcount
                    self._db.execute("COMMIT")
                except BaseException:
                    _rollback(self._db)
                    raise
        except (sqlite3.Error, OSError) as exc:
            raise self._failure(exc, "write") from exc
        self.health.succeeded()
        return n

    def _insert(self, rows: list[tuple]) -> None:
        self._write(f"INSERT INTO receipts ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})", rows, many=True)

    def _insert_shadow(self, receipt_id: str, indices: list[int], found_us: int) -> None:
        self._write(f"INSERT OR IGNORE INTO {SHADOW_TABLE} (receipt_id, item_index, found_us) VALUES (?, ?, ?)",
                    [(receipt_id, i, found_us) for i in indices], many=True)

    def get(self, receipt_id: str, *, leaves: bool = True) -> Receipt | None:
        cols = _COLS if leaves else _COLS_NO_LEAVES
        try:
            with self._lock:
                row = self._db.execute(f"SELECT {cols} FROM receipts WHERE id = ?", (receipt_id,)).fetchone()
                shadow = [] if row is None else self._db.execute(
                    f"SELECT item_index FROM {SHADOW_TABLE} WHERE receipt_id = ?", (receipt_id,)).fetchall()
        except sqlite3.Error as exc:
            raise self._failure(exc, "read") from exc
        return None if row is None else receipt_from_row(row, [i for (i,) in shadow])

    def page(self, after: str | None = None, limit: int = 100, *, order: str = "asc") -> list[Receipt]:
        check_limit(limit)
        asc = check_order(order)
        where, args = ("", ()) if after is None else (f"WHERE id {'>' if asc else '<'} ?", (after,))
        try:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT {_COLS_NO_LEAVES} FROM receipts {where} ORDER BY id {'ASC' if asc else 'DESC'} "
                    "LIMIT ?",
                    (*args, min(limit, MAX_PAGE))).fetchall()
                ends = sorted((rows[0][0], rows[-1][0])) if rows else None  # first and last id
                shadow = [] if ends is None else self._db.execute(
                    f"SELECT receipt_id, item_index FROM {SHADOW_TABLE} WHERE receipt_id BETWEEN ? AND ?",
                    ends).fetchall()
        except sqlite3.Error as exc:
            raise self._failure(exc, "read") from exc
        by_id: dict[str, list[int]] = {}
        for rid, i in shadow:
            by_id.setdefault(rid, []).append(i)
        return [receipt_from_row(r, by_id.get(r[0], ())) for r in rows]

    def delete_older_than(self, cutoff: datetime) -> int:
        return self._delete_chunks("created_us < ?", (to_micros(cutoff),))

    def delete_beyond_newest(self, keep: int) -> int:
        boundary = self._read_one("SELECT id FROM receipts ORDER BY id DESC LIMIT 1 OFFSET ?", (keep - 1,))
        return 0 if boundary is None else self._delete_chunks("id < ?", (boundary,))

    def _delete_chunks(self, where: str, args: tuple) -> int:
        total = 0
        while True:
            n = self._write(f"DELETE FROM receipts WHERE id IN "
                            f"(SELECT id FROM receipts WHERE {where} ORDER BY id LIMIT {self.prune_chunk:d})", args)
            total += n
            if n < self.prune_chunk:
                return total

    def count(self) -> int:
        return int(self._read_one("SELECT count(*) FROM receipts"))

    def exists(self, receipt_id: str) -> bool:
        return self._read_one("SELECT 1 FROM receipts WHERE id = ?", (receipt_id,)) is not None

    def ping(self) -> None:
        self._read_one("SELECT 1")

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back the open transaction, if any.  A failed COMMIT (SQLITE_FULL among others)
    has already rolled back: a ROLLBACK then raised "cannot rollback - no transaction is
    active", which replaced the error that said what went wrong."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the first error is the one to report
