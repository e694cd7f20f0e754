"""Shared fixtures: one started engine per session, the external vector folder, caches,
and a live uvicorn server on loopback around the shared engine."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT.parent / "shared" / "vectors"

# Generated known answers and host-built kernels are cached between runs (git-ignored).
os.environ.setdefault("ZAPVERIFY_KAT_CACHE", str(ROOT / ".cache" / "kat"))
os.environ.setdefault("ZAPVERIFY_KERNEL_CACHE", str(ROOT / ".cache" / "kernels"))
os.environ.setdefault("ZAPVERIFY_DATA_DIR", str(ROOT / ".cache" / "data"))
os.environ.setdefault("ZAPVERIFY_KERNEL_VERIFY", "1")  # kernels' ZV_CHECK bounds checks on (zv_port.cuh)

#: A PostgreSQL server for the store tests (``scripts/pg_test_cluster start`` prints one).
PG_URL = os.environ.get("ZAPVERIFY_TEST_POSTGRES_URL")

needs_vectors = pytest.mark.skipif(not VECTORS.is_dir(), reason="../shared/vectors is absent")


@pytest.fixture(scope="session")
def engine():
    from app.engine.verify.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(backend="cpu"))
    eng.start()
    assert eng.ready
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def vectors_root() -> Path:
    if not VECTORS.is_dir():
        pytest.skip("../shared/vectors is absent")
    return VECTORS


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


@pytest.fixture(scope="module")
def live_server(engine):
    """A real uvicorn server (in a thread) on loopback around the shared engine; receipts off."""
    from app.config import Settings
    from app.main import create_app
    from tests.server import LiveServer

    with LiveServer(create_app(Settings(receipts=False), engine=engine)) as server:
        yield server
