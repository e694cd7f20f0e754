"""Open a receipt store from its URL (docs/operations.md, "Receipts").

Kept apart from :mod:`app.engine.receipts.store`, so the interface does not import its
own implementations (each of which imports the interface).
"""

from __future__ import annotations

from app.core.errors import ConfigError
from app.engine.receipts.postgres import PostgresStore, driver_missing
from app.engine.receipts.sqlite import SqliteStore
from app.engine.receipts.store import ReceiptStore

#: The URL prefixes of a PostgreSQL store.
POSTGRES = ("postgresql://", "postgres://")


def missing_dependency(url: str) -> str | None:
    """Why the store of ``url`` cannot be opened in this environment whatever the database
    says (an optional dependency not installed), in one line with the command that installs
    it; None when nothing is missing.  ``zapverify serve`` asks before anything starts."""
    return driver_missing() if url.startswith(POSTGRES) else None


def open_store(url: str, *, pool_size: int = 8) -> ReceiptStore:
    """Open (and create or migrate) the store named by ``url``; see :mod:`app.engine.receipts.store` for the URL forms.

    Raises :class:`app.core.errors.ConfigError` for a URL of another kind and
    :class:`app.core.errors.StoreUnavailable` when the database cannot be opened.
    """
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://"):]
        if not rest.startswith("/") or rest == "/":
            raise ConfigError("a SQLite URL is sqlite:///relative/path or sqlite:////absolute/path",
                              field="database_url")
        return SqliteStore(rest[1:])
    if url.startswith(POSTGRES):
        return PostgresStore(url, pool_size=pool_size)
    raise ConfigError("database_url must start with sqlite:// or postgresql://", field="database_url")
