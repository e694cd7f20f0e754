"""Shared fixtures: one started CPU engine per session, and a live uvicorn server on loopback."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from app.config import Settings
from app.engine.dispatch import Engine, EngineConfig


@pytest.fixture(scope="session")
def engine():
    """A CPU engine whose self-test has passed (shared: start-up costs a second or two).

    Threads only: worker processes could outlive the session and hold its output pipe open.
    """
    eng = Engine(EngineConfig(backend="cpu", cpu_workers=2, cpu_parallelism="thread"))
    eng.start()
    assert eng.ready
    yield eng
    eng.close()


class LiveServer:
    """uvicorn serving ``app`` on 127.0.0.1 in a thread of this process."""

    def __init__(self, app):
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_max_size=64 * 1024 * 1024))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture(scope="module")
def live_server(engine):
    """A real uvicorn server on loopback around :func:`app.main.create_app` and the shared engine."""
    from app.main import create_app

    with LiveServer(create_app(Settings(), engine=engine)) as server:
        yield server
