"""Start a real uvicorn process on a free loopback port for system-level tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``python -m uvicorn app.main:create_app --factory`` with ``env`` added to the environment;
    with ``cli=True``, ``python -m app.cli serve`` instead (the protocols and logging that
    ``zapverify serve`` sets up: app/api/http_limits.py, app/api/ws_limits.py, app/logs.py),
    one worker and single-process metrics unless ``env`` says otherwise."""

    def __init__(self, env: dict[str, str] | None = None, port: int | None = None, log: Path | None = None,
                 *, cli: bool = False, log_level: str = "warning"):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        base = dict(os.environ)
        if cli:
            for name in ("ZAPVERIFY_WORKERS", "PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):
                base.pop(name, None)
        self.env = {**base, "ZAPVERIFY_PORT": str(self.port), **(env or {})}
        self.log, self.cli, self.log_level = log, cli, log_level
        self.proc: subprocess.Popen | None = None

    def start(self, ready_timeout: float = 120.0) -> ServerProcess:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        cmd = (["-m", "app.cli", "serve"] if self.cli else
               ["-m", "uvicorn", "app.main:create_app", "--factory", "--host", "127.0.0.1"])
        self.proc = subprocess.Popen(
            [sys.executable, *cmd, "--port", str(self.port), "--log-level", self.log_level],
            cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"server on {self.url} not ready in {ready_timeout} s")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def running_server(env: dict[str, str] | None = None, **kw):
    srv = ServerProcess(env, **kw).start()
    try:
        yield srv
    finally:
        srv.stop()


class LiveServer:
    """uvicorn serving an ASGI ``app`` on 127.0.0.1 in a thread of this process (a shared engine,
    no start-up of its own); ``with LiveServer(app) as s: s.url``."""

    def __init__(self, app, **config):
        import threading

        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **config))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> LiveServer:
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
