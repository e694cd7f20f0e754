"""The shared receipt store: PostgreSQL through psycopg 3 and a psycopg_pool connection pool.

Replicas behind a load balancer point ``ZAPVERIFY_DATABASE_URL`` at one database.  Each
write is one transaction committed with the server's ``synchronous_commit`` (on by
default, so the commit is flushed to the WAL before :meth:`PostgresStore.put` returns).
Migrations run under a transaction-scoped advisory lock so that replicas starting together
migrate once.  psycopg is imported here only, so the rest of zapverify runs without it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from app.core.errors import ConfigError, StoreUnavailable
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
               id               uuid PRIMARY KEY,
               created_us       bigint NOT NULL,
               schemes          text NOT NULL,
               item_count       integer NOT NULL CHECK (item_count >= 1),
               valid_count      integer NOT NULL CHECK (valid_count BETWEEN 0 AND item_count),
               merkle_root      bytea NOT NULL CHECK (length(merkle_root) = 32),
               verdict_bitmap   bytea NOT NULL,
               leaves           bytea NOT NULL,
               backends         text NOT NULL,
               duration_seconds double precision NOT NULL,
               source           text NOT NULL
           )""",
        "CREATE INDEX receipts_created_us ON receipts (created_us)",
        # Leaf hashes are random bytes: trying to compress them only costs CPU.
        "ALTER TABLE receipts ALTER COLUMN leaves SET STORAGE EXTERNAL",
    ),
    (
        # Version 2: items a shadow check found wrong after their receipt was written
        # (app/engine/verify/shadow.py); deleted with their receipt.
        """CREATE TABLE shadow_mismatches (
               receipt_id uuid NOT NULL REFERENCES receipts (id) ON DELETE CASCADE,
               item_index integer NOT NULL CHECK (item_index >= 0),
               found_us   bigint NOT NULL,
               PRIMARY KEY (receipt_id, item_index)
           )""",
    ),
    # Version 3: the id of the request that carried the batch (X-Request-ID; app/logs.py).
    ("ALTER TABLE receipts ADD COLUMN request_id text",),
)

#: pg_advisory_xact_lock key held while migrating (b"zapvrfy\x01" as a big-endian int64).
MIGRATION_LOCK = int.from_bytes(b"zapvrfy\x01", "big")

_COLS = ", ".join(COLUMNS)
#: PostgreSQL types of COLUMNS, in order, for binary COPY.
_COPY_TYPES = ["uuid", "int8", "text", "int4", "int4", "bytea", "bytea", "bytea", "text", "float8", "text", "text"]
_COLS_NO_LEAVES = ", ".join("NULL" if c == "leaves" else c for c in COLUMNS)


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for logs and status pages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def driver_missing() -> str | None:
    """Why a ``postgresql://`` URL cannot be used in this environment, with the command that
    fixes it (psycopg 3 or psycopg_pool not installed: the ``postgres`` extra), or None."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        from app.build import install_command

        return (f"a postgresql:// database URL needs the postgres extra ({exc.name or 'psycopg'} is not installed): "
                f"{install_command('postgres')}")
    return None


class PostgresStore(ReceiptStore):
    """Receipts in the PostgreSQL database at ``url`` (a libpq connection URI).

    Args:
        url: ``postgresql://user:password@host:port/dbname?…``.
        pool_size: most connections held open at once.
        connect_timeout: seconds to wait for the first connection at start.
        request_timeout: seconds a read or write waits for a connection of the pool while the
            store is up (while it is down they are refused at once, see
            :attr:`ReceiptStore.health`): short, so that requests in flight when the database
            stops fail within it rather than after the connect timeout (the group commit
            writes one batch of receipts per connection, so a healthy pool has one idle).
        probe_timeout: seconds a health probe (``SELECT 1``) may wait for a connection.

    Raises :class:`app.core.errors.ConfigError` when psycopg is not installed,
    :class:`StoreUnavailable` when the server cannot be reached in time and
    :class:`app.core.errors.StoreSchemaTooNew` when the schema is newer than this build.
    """

    kind = "postgresql"

    def __init__(self, url: str, *, pool_size: int = 8, connect_timeout: float = 10.0,
                 request_timeout: float = 1.5, probe_timeout: float = 2.0,
                 migrations: tuple[tuple[str, ...], ...] = MIGRATIONS):
        super().__init__()
        missing = driver_missing()
        if missing:
            raise ConfigError(missing, field="database_url")
        import psycopg
        from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

        self._errors = (psycopg.Error,)  # PoolTimeout and PoolClosed derive from it
        self._psycopg, self._pool_timeout, self._pool_closed = psycopg, PoolTimeout, PoolClosed
        self.probe_timeout = probe_timeout
        self._conninfo = url  # unredacted: the recovery probe connects directly
        self.url = redact(url)
        self._migrations = migrations
        self._pool = ConnectionPool(url, min_size=1, max_size=max(1, pool_size), open=False,
                                    timeout=request_timeout, name="zapverify-receipts",
                                    check=ConnectionPool.check_connection)
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
            self._migrate()
        except self._errors as exc:
            self._pool.close()
            raise StoreUnavailable(f"cannot open PostgreSQL receipt store {self.url}: {exc}") from exc
        except BaseException:
            self._pool.close()
            raise

    # ------------------------------------------------------------------ schema
    def _migrate(self) -> None:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS zapverify_schema_migrations ("
                         "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
            row = conn.execute("SELECT coalesce(max(version), 0) FROM zapverify_schema_migrations").fetchone()
            found = row[0] if row is not None else 0
            check_schema_version(found, len(self._migrations), self.url)
            for version in range(found + 1, len(self._migrations) + 1):
                for stmt in self._migrations[version - 1]:
                    conn.execute(stmt)
                conn.execute("INSERT INTO zapverify_schema_migrations (version) VALUES (%s)", (version,))

    def schema_version(self) -> int:
        return int(self._one("SELECT max(version) FROM zapverify_schema_migrations")[0])

    def exists(self, receipt_id: str) -> bool:
        return self._one("SELECT 1 FROM receipts WHERE id = %s", (receipt_id,)) is not None

    # ------------------------------------------------------------------ health
    def _classify(self, exc: BaseException) -> Fault | None:
        pg = self._psycopg
        if isinstance(exc, self._pool_closed) or isinstance(exc, pg.IntegrityError) \
                or not isinstance(exc, pg.Error):
            return None  # closed by us, or a repeated id: not the database failing
        if isinstance(exc, self._pool_timeout):
            return Fault("unreachable", f"{self.url}: no connection within the pool timeout ({exc})")
        state = getattr(exc, "sqlstate", None) or ""
        if state == "53100":  # disk_full
            return Fault("disk_full", f"{self.url}: {exc}")
        if state.startswith("08") or state in ("57P01", "57P02", "57P03") or \
                (not state and isinstance(exc, pg.OperationalError)):
            # connection exception class, server shutting down, or libpq failing to connect
            return Fault("unreachable", f"{self.url}: {exc}")
        if state == "25006":  # read_only_sql_transaction (a standby)
            return Fault("read_only", f"{self.url}: {exc}")
        return Fault("write_failed", f"{self.url}: {exc}")

    def _probe(self, down_reason: str | None) -> None:
        if down_reason == "unreachable":
            # The pool retries its lost connections with an exponential backoff (1, 2, 4,
            # 8 s, ...): after a 10 s outage it took 12-16 s to notice the server was back.
            # A connection of our own says at once whether it is; then the pool is told to
            # replace its dead connections now.
            with self._psycopg.connect(self._conninfo, connect_timeout=max(1, round(self.probe_timeout))) as conn:
                conn.execute("SELECT 1").fetchone()
            self._pool.check()
        # A short wait of its own: the pool's timeout (per request) is what made every
        # request hang while the server was stopped.
        with self._pool.connection(timeout=self.probe_timeout) as conn:
            conn.execute("SELECT 1").fetchone()

    # ------------------------------------------------------------------ access
    def _one(self, sql: str, args: tuple = ()) -> Any:
        """The first row of ``sql`` (aggregates always have one)."""
        self.health.gate(write=False)  # unreachable: refused at once, not after the pool timeout
        try:
            with self._pool.connection() as conn:
                return conn.execute(sql, args).fetchone()
        except self._errors as exc:
            raise self._failure(exc, "read") from exc

    def _write(self, sql: str, args: tuple = ()) -> int:
        self.health.gate(write=False)
        try:
            with self._pool.connection() as conn:  # commits on leaving the block
                n = conn.execute(sql, args).rowcount
        except self._errors as exc:
            raise self._failure(exc, "write") from exc
        self.health.succeeded()
        return n

    def _insert(self, rows: list[tuple]) -> None:
        # COPY streams every row of a joined batch in one statement of one transaction: one
        # round trip and no per-row statement, where executemany paid one per receipt.  The
        # binary format sends the leaf hashes (32 bytes per item) as they are, not as hex text.
        try:
            with self._pool.connection() as conn, conn.cursor() as cur, \
                    cur.copy(f"COPY receipts ({_COLS}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(_COPY_TYPES)
                for row in rows:
                    copy.write_row((uuid.UUID(row[0]), *row[1:]))
        except self._errors as exc:
            raise self._failure(exc, "write") from exc
        self.health.succeeded()

    def _insert_shadow(self, receipt_id: str, indices: list[int], found_us: int) -> None:
        self.health.gate(write=False)
        try:
            with self._pool.connection() as conn, conn.cursor() as cur:  # one transaction
                cur.executemany(f"INSERT INTO {SHADOW_TABLE} (receipt_id, item_index, found_us) "
                                "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                                [(receipt_id, i, found_us) for i in indices])
        except self._errors as exc:
            raise self._failure(exc, "write") from exc
        self.health.succeeded()

    def get(self, receipt_id: str, *, leaves: bool = True) -> Receipt | None:
        self.health.gate(write=False)
        try:
            with self._pool.connection() as conn:
                row = conn.execute(f"SELECT {_COLS if leaves else _COLS_NO_LEAVES} FROM receipts WHERE id = %s",
                                   (receipt_id,)).fetchone()
                shadow = [] if row is None else conn.execute(
                    f"SELECT item_index FROM {SHADOW_TABLE} WHERE receipt_id = %s", (receipt_id,)).fetchall()
        except self._errors as exc:
            raise self._failure(exc, "read") from exc
        return None if row is None else receipt_from_row(row, [i for (i,) in shadow])

    def page(self, after: str | None = None, limit: int = 100, *, order: str = "asc") -> list[Receipt]:
        check_limit(limit)
        asc = check_order(order)
        where, args = ("", ()) if after is None else (f"WHERE id {'>' if asc else '<'} %s", (after,))
        self.health.gate(write=False)
        try:
            with self._pool.connection() as conn:
                rows = conn.execute(f"SELECT {_COLS_NO_LEAVES} FROM receipts {where} "
                                    f"ORDER BY id {'ASC' if asc else 'DESC'} LIMIT %s",
                                    (*args, min(limit, MAX_PAGE))).fetchall()
                ends = sorted((rows[0][0], rows[-1][0])) if rows else None  # first and last id
                shadow = [] if ends is None else conn.execute(
                    f"SELECT receipt_id, item_index FROM {SHADOW_TABLE} WHERE receipt_id BETWEEN %s AND %s",
                    ends).fetchall()
        except self._errors as exc:
            raise self._failure(exc, "read") from exc
        by_id: dict[str, list[int]] = {}
        for rid, i in shadow:
            by_id.setdefault(str(rid), []).append(i)
        return [receipt_from_row(r, by_id.get(str(r[0]), ())) for r in rows]

    def delete_older_than(self, cutoff: datetime) -> int:
        return self._delete_chunks("created_us < %s", (to_micros(cutoff),))

    def delete_beyond_newest(self, keep: int) -> int:
        row = self._one("SELECT id FROM receipts ORDER BY id DESC OFFSET %s LIMIT 1", (keep - 1,))
        return 0 if row is None else self._delete_chunks("id < %s", (row[0],))

    def _delete_chunks(self, where: str, args: tuple) -> int:
        total = 0
        while True:
            n = self._write(f"DELETE FROM receipts WHERE id IN "
                            f"(SELECT id FROM receipts WHERE {where} ORDER BY id LIMIT {self.prune_chunk:d})", args)
            total += n
            if n < self.prune_chunk:
                return total

    def count(self) -> int:
        return int(self._one("SELECT count(*) FROM receipts")[0])

    def ping(self) -> None:
        self._one("SELECT 1")

    def close(self) -> None:
        self._pool.close()
