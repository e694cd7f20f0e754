"""The embedded receipt store: one SQLite file, WAL journal, ``synchronous=FULL``.

With WAL and ``synchronous=FULL`` every commit is fsync'ed to the write-ahead log before
:meth:`SqliteStore.put` returns, so a receipt whose response was sent survives the process
being killed or the machine losing power (SQLite's "Write-Ahead Logging" and ``PRAGMA
synchronous`` documentation).  One connection, serialised by a lock: the writes are bound
by that fsync anyway, and reads are single indexed lookups.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from app.core.errors import StoreUnavailable
from app.engine.receipts.store import (
    COLUMNS,
    MAX_PAGE,
    Receipt,
    ReceiptStore,
    check_limit,
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
)

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
            self._migrate()
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
            db.execute("ROLLBACK")
            raise

    def schema_version(self) -> int:
        return self._read_one("SELECT max(version) FROM zapverify_schema_migrations")

    def pragma(self, name: str) -> object:
        """The value of ``PRAGMA name`` (tests check ``journal_mode`` and ``synchronous``)."""
        return self._read_one(f"PRAGMA {name}")

    # ------------------------------------------------------------------ access
    def _read_one(self, sql: str, args: tuple = ()) -> Any:
        try:
            with self._lock:
                row = self._db.execute(sql, args).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"receipt store read failed: {exc}") from exc
        return None if row is None else row[0]

    def _write(self, sql: str, args: tuple | list = (), many: bool = False) -> int:
        try:
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    n = (self._db.executemany if many else self._db.execute)(sql, args).rowcount
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"receipt store write failed: {exc}") from exc
        return n

    def _insert(self, rows: list[tuple]) -> None:
        self._write(f"INSERT INTO receipts ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})", rows, many=True)

    def get(self, receipt_id: str, *, leaves: bool = True) -> Receipt | None:
        cols = _COLS if leaves else _COLS_NO_LEAVES
        try:
            with self._lock:
                row = self._db.execute(f"SELECT {cols} FROM receipts WHERE id = ?", (receipt_id,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"receipt store read failed: {exc}") from exc
        return None if row is None else receipt_from_row(row)

    def page(self, after: str | None = None, limit: int = 100) -> list[Receipt]:
        check_limit(limit)
        try:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT {_COLS_NO_LEAVES} FROM receipts WHERE id > ? ORDER BY id LIMIT ?",
                    ("" if after is None else after, min(limit, MAX_PAGE))).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"receipt store read failed: {exc}") from exc
        return [receipt_from_row(r) for r in rows]

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

    def ping(self) -> None:
        self._read_one("SELECT 1")

    def close(self) -> None:
        with self._lock:
            self._db.close()
