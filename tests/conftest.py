"""Shared fixtures."""

from __future__ import annotations

import os
import uuid
from urllib.parse import quote

import pytest

#: A PostgreSQL server for the store tests (``scripts/pg_test_cluster start`` prints one).
PG_URL = os.environ.get("ZAPVERIFY_TEST_POSTGRES_URL")


@pytest.fixture
def pg_schema():
    """A fresh schema on the test PostgreSQL server, dropped afterwards; yields a URL whose
    ``search_path`` is that schema.  Skips when ``ZAPVERIFY_TEST_POSTGRES_URL`` is unset."""
    if not PG_URL:
        pytest.skip("ZAPVERIFY_TEST_POSTGRES_URL not set (scripts/pg_test_cluster start prints one)")
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{sep}options={quote(f'-csearch_path={schema}')}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
