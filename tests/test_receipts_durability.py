"""A receipt whose response reached the client survives the server being SIGKILLed.

The real server (``uvicorn app.main:create_app --factory``) runs as a subprocess in its own
process group with a temporary data dir; client threads POST /v1/verify in a loop and
record the batch id of every 200 they read in full; the whole process group is killed with
SIGKILL while requests are in flight; a new server on the same database must then serve
every recorded id from GET /v1/receipts/{id}.  Runs on SQLite always and on PostgreSQL
when ``ZAPVERIFY_TEST_POSTGRES_URL`` is set.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import nacl.signing
import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Acknowledged responses to collect before the kill.
ACK_BEFORE_KILL = 60
CLIENTS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``uvicorn app.main:create_app --factory`` on a loopback port, in a new session."""

    def __init__(self, env: dict[str, str], log: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}; see {self._log.name}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready after {timeout} s; see {self._log.name}")

    def sigkill(self) -> None:
        """SIGKILL the server and every process it started (its CPU worker pool)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        self._log.close()


def _request_body(rng: random.Random) -> dict:
    sk = nacl.signing.SigningKey(rng.randbytes(32))
    items = []
    for _ in range(8):
        msg = rng.randbytes(24)
        items.append({"scheme": "ed25519", "public_key": sk.verify_key.encode().hex(), "message": msg.hex(),
                      "signature": sk.sign(msg).signature.hex()})
    return {"items": items}


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'receipts.sqlite3'}"
    return request.getfixturevalue("pg_schema")


def test_acknowledged_receipts_survive_sigkill(tmp_path, database_url):
    env = {**os.environ, "ZAPVERIFY_DATA_DIR": str(tmp_path / "data"), "ZAPVERIFY_DATABASE_URL": database_url,
           "ZAPVERIFY_RECEIPTS": "true", "ZAPVERIFY_CPU_WORKERS": "1", "ZAPVERIFY_INSTANCE": "durability"}
    log = tmp_path / "server.log"
    server = Server(env, log)
    acked: list[str] = []
    failures: list[str] = []
    lock = threading.Lock()
    enough = threading.Event()
    stop = threading.Event()

    def client(seed: int) -> None:
        body = _request_body(random.Random(seed))
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while not stop.is_set():
                try:
                    r = http.post("/v1/verify", json=body)
                except httpx.HTTPError:
                    continue  # the server is gone (or going): no answer, nothing acknowledged
                if r.status_code == 200:
                    with lock:
                        acked.append(r.json()["batch_id"])
                        if len(acked) >= ACK_BEFORE_KILL:
                            enough.set()
                else:
                    failures.append(f"{r.status_code} {r.text[:200]}")

    try:
        server.wait_ready()
        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        assert enough.wait(240), f"only {len(acked)} responses before the deadline; failures: {failures[:3]}"
        server.sigkill()  # mid-load: the clients are still posting
        stop.set()
        for t in threads:
            t.join(60)
        assert not failures, failures[:3]
        with lock:
            acknowledged = list(acked)

        server.stop()
        server = Server(env, log)
        server.wait_ready()
        found = 0
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for rid in acknowledged:
                r = http.get(f"/v1/receipts/{rid}")
                if r.status_code == 200 and r.json()["count"] == 8:
                    found += 1
            stored, after = 0, None
            while True:  # receipts written whose response never arrived are allowed, not required
                page = http.get("/v1/receipts", params={"limit": 1000, **({"after": after} if after else {})}).json()
                stored += len(page["receipts"])
                if page["next_after"] is None:
                    break
                after = page["next_after"]
        # The counts go into the failure message, not the test run's output (no stray line).
        counts = f"[{database_url.split(':', 1)[0]}] acknowledged={len(acknowledged)} found={found} stored={stored}"
        assert found == len(acknowledged), counts
        assert stored >= found, counts
    finally:
        stop.set()
        server.stop()
