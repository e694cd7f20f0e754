"""Checks of the compose deployment running in Docker (tests/containers/stack.py).

They run from ``scripts/container_test``, which builds the images, starts the stack and
sets ``ZAPVERIFY_CONTAINER_TEST=1``; ``make test`` skips them.
"""

from __future__ import annotations

import os

import pytest

from tests.containers.stack import Stack

# The Chromium fixtures of the loopback system test, for the dashboard check here too.
from tests.system.test_dashboard_browser import browser, page  # noqa: F401


def pytest_collection_modifyitems(config, items):
    if os.environ.get("ZAPVERIFY_CONTAINER_TEST") == "1":
        return
    skip = pytest.mark.skip(reason="container test: run scripts/container_test (it sets ZAPVERIFY_CONTAINER_TEST=1)")
    for item in items:
        if "tests/containers/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def stack() -> Stack:
    return Stack.from_env()
