"""The server's log (app/logs.py; docs/operations.md, "Logs"): one format for every logger,
JSON lines that parse, a request id from X-Request-ID (or made) on the response and on every
line logged for the request, a short start-up, and a busy port as one clear error."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app import logs
from app.engine.reference import kat
from tests.server import ServerProcess

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("given", "kept"), [("abc-123", True), ("a" * 128, True), ("trace:4bf9/7@x+y=z", True),
                                               ("", False), ("a" * 129, False), ("has space", False),
                                               ("new\nline", False), ("é", False)])
def test_a_client_request_id_is_kept_only_when_it_is_a_safe_token(given, kept):
    got = logs.request_id_of([(b"X-Request-ID", given.encode("utf-8"))])
    assert (got == given) is kept
    if not kept:
        assert len(got) == 32 and int(got, 16) >= 0


def test_text_lines_carry_the_request_id_only_inside_a_request():
    record = logging.LogRecord("zapverify.pipeline", logging.INFO, __file__, 1, "batch %s", ("b1",), None)
    logs.RequestContext().filter(record)
    assert logs.TextFormatter().format(record).endswith("zapverify.pipeline: batch b1")
    record.request_id = "r-9"
    assert logs.TextFormatter().format(record).endswith("zapverify.pipeline: batch b1 request_id=r-9")


def _serve(port: int, env: dict[str, str]) -> subprocess.Popen:
    import os

    return subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], cwd=ROOT,
                            env={**os.environ, "ZAPVERIFY_RECEIPTS": "false", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_json_logs_parse_and_carry_the_client_request_id(tmp_path):
    log = tmp_path / "server.log"
    srv = ServerProcess({"ZAPVERIFY_LOG_FORMAT": "json", "ZAPVERIFY_DATA_DIR": str(tmp_path / "data")},
                        log=log, cli=True, log_level="info").start()
    url = srv.url
    try:
        item = kat.sign_items("ed25519", 1, seed=3)[0]
        r = httpx.post(url + "/v1/verify", headers={"X-Request-ID": "client-req-42"}, json={"items": [
            {"scheme": "ed25519", "public_key": item.public_key.hex(), "message": item.message.hex(),
             "signature": item.signature.hex()}]})
        assert r.status_code == 200 and r.headers["x-request-id"] == "client-req-42"
        made = httpx.get(url + "/healthz").headers["x-request-id"]
        assert len(made) == 32
        receipt = httpx.get(url + f"/v1/receipts/{r.json()['batch_id']}").json()
        assert receipt["request_id"] == "client-req-42"
    finally:
        srv.stop()
    # Every line is JSON from the first (issue 53: `serve`'s dashboard line was a plain print).
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message", "request_id"} <= set(d) for d in lines)
    assert lines[0]["logger"] == "zapverify.cli" and lines[0]["message"].startswith("dashboard at http://")
    access = [d for d in lines if d["logger"] == "uvicorn.access" and d.get("path") == "/v1/verify"]
    assert access and access[0]["request_id"] == "client-req-42" and access[0]["status"] == 200
    assert access[0]["method"] == "POST" and access[0]["route"] == "/v1/verify" and access[0]["duration_ms"] > 0
    assert all(len(d["message"]) < 300 for d in lines)  # start-up lines are short (detail at debug)


def test_a_busy_port_is_one_clear_error_before_anything_starts():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = _serve(port, {})
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "dashboard at" not in out and "Started server process" not in err
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_missing_optional_dependency_is_one_line_with_the_install_command(fmt):
    """postgresql:// without the postgres extra printed 84 lines and two tracebacks before a
    message naming a PyPI install (issue 53): now one line, before anything else, naming the
    command for this checkout."""
    import os

    blocked = "import sys; sys.modules['psycopg'] = None; from app.cli import main; sys.exit(main(sys.argv[1:]))"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there: the check must not need the database
    proc = subprocess.run([sys.executable, "-c", blocked, "serve", "--port", str(closed)], cwd=ROOT,
                          env={**os.environ, "ZAPVERIFY_DATABASE_URL": f"postgresql://zv@127.0.0.1:{closed}/zv",
                               "ZAPVERIFY_LOG_FORMAT": fmt}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    text = json.loads(lines[0])["message"] if fmt == "json" else lines[0]
    assert "needs the postgres extra (psycopg is not installed)" in text
    assert f"{sys.executable} -m pip install -e '{ROOT}[postgres]'" in text
