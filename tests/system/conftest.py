"""System tests: the compose deployment on loopback (tests/system/cluster.py).

They run from ``scripts/system_test`` (which installs nginx, PostgreSQL and Chromium and
sets ``ZAPVERIFY_SYSTEM_TEST=1``), not from ``make test``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.system.cluster import ROOT, Cluster, nginx_binary

ARTIFACTS = Path(os.environ.get("ZAPVERIFY_ARTIFACTS", ROOT / "artifacts"))


def pytest_collection_modifyitems(config, items):
    if os.environ.get("ZAPVERIFY_SYSTEM_TEST") == "1":
        return
    skip = pytest.mark.skip(reason="system test: run scripts/system_test (it sets ZAPVERIFY_SYSTEM_TEST=1)")
    for item in items:
        if "tests/system/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster():
    url = os.environ.get("ZAPVERIFY_TEST_POSTGRES_URL")
    if not url:
        pytest.fail("ZAPVERIFY_TEST_POSTGRES_URL is not set (scripts/system_test starts PostgreSQL)")
    if not nginx_binary():
        pytest.fail("nginx is not installed (scripts/system_test installs it)")
    scratch = Path(tempfile.mkdtemp(prefix="zapverify-system-"))
    c = Cluster(url, scratch, ARTIFACTS)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(scratch, ignore_errors=True)
