"""Shared fixtures: one started engine per session, the external vector folder, caches,
and a live uvicorn server on loopback around the shared engine."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import NoReturn
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The external vectors (../shared/vectors; ZAPVERIFY_VECTORS_DIR points elsewhere, for the test of this rule).
VECTORS = Path(os.environ.get("ZAPVERIFY_VECTORS_DIR") or ROOT.parent / "shared" / "vectors")
#: Under CI the vectors must be there: a missing folder fails the vector suites instead of skipping them.
IN_CI = os.environ.get("CI", "").lower() == "true"

# Generated known answers and host-built kernels are cached between runs (git-ignored).
os.environ.setdefault("ZAPVERIFY_KERNEL_CACHE", str(ROOT / ".cache" / "kernels"))
os.environ.setdefault("ZAPVERIFY_DATA_DIR", str(ROOT / ".cache" / "data"))
os.environ.setdefault("ZAPVERIFY_KERNEL_VERIFY", "1")  # kernels' ZV_CHECK bounds checks on (zv_port.cuh)
# In-process clients call the app as Host "testserver", which the loopback default of
# allowed_hosts refuses (tests/test_api_security.py checks that default explicitly).
os.environ.setdefault("ZAPVERIFY_ALLOWED_HOSTS", '["*"]')

#: A PostgreSQL server for the store tests (``scripts/pg_test_cluster start`` prints one).
PG_URL = os.environ.get("ZAPVERIFY_TEST_POSTGRES_URL")



# py_ecc (the BLS oracle of some test modules) raises the recursion limit to 100000 when it
# is imported, at collection; past Python's own limit, the tests of deeply nested JSON
# overflow the C stack (a crash) instead of raising RecursionError.  py_ecc works with it.
_RECURSION_LIMIT = sys.getrecursionlimit()


def pytest_collection_finish(session):
    sys.setrecursionlimit(_RECURSION_LIMIT)


def vectors_missing(what: str) -> NoReturn:
    """Skip a test whose external vectors are absent; fail it under ``CI=true``."""
    reason = f"{what} is absent (../shared/vectors; SOURCES.md there says where each file comes from)"
    if IN_CI:
        pytest.fail(f"{reason}; CI=true requires the vectors", pytrace=False)
    pytest.skip(reason)


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
        vectors_missing(str(VECTORS))
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
    from app.engine.runtime import Runtime
    from app.main import create_app
    from tests.server import LiveServer

    with LiveServer(create_app(Settings(receipts=False), runtime=Runtime(engine))) as server:
        yield server


def pytest_terminal_summary(terminalreporter):
    """Why tests were skipped: one line per reason, with how many (``-rs`` lists every test)."""
    from collections import Counter

    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.write_sep("-", "skipped, by reason")
        for reason, n in reasons.most_common():
            terminalreporter.write_line(f"{n:4d}  {reason}")
