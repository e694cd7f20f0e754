"""HTTP request heads are bounded on a direct bind (issue 37; app/api/http_limits.py): a real
``zapverify serve`` on loopback refuses an 8 MiB header, 100,000 headers and too many header
fields with 431, cuts a client that trickles header lines after the header deadline, and
still answers an ordinary request."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.server import ROOT, free_port

TIMEOUT = 2.0  # ZAPVERIFY_HEADER_TIMEOUT_SECONDS of the server under test


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    env = {**os.environ, "ZAPVERIFY_DATA_DIR": str(tmp_path_factory.mktemp("data")), "ZAPVERIFY_BACKEND": "cpu",
           "ZAPVERIFY_HEADER_TIMEOUT_SECONDS": str(TIMEOUT)}
    # One worker, single-process metrics (an empty PROMETHEUS_MULTIPROC_DIR would make
    # prometheus_client write its value files into the working directory).
    for name in ("ZAPVERIFY_WORKERS", "PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, f"zapverify serve exited with {proc.returncode}"
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "zapverify serve did not start"
        time.sleep(0.2)
    yield port
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


def exchange(port: int, head: bytes, timeout: float = 10.0) -> bytes:
    """Send ``head`` (ignoring a reset once the server has answered) and read until the server
    closes; returns what came back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(head)
        except (BrokenPipeError, ConnectionResetError):
            pass
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass
        return got


def status(response: bytes) -> int | None:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else None


def test_an_ordinary_request_is_answered(server):
    got = exchange(server, b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert status(got) == 200 and got.endswith(b'{"status":"ok"}')


def test_an_8_mib_header_is_refused(server):
    head = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * (8 << 20) + b"\r\nConnection: close\r\n\r\n"
    got = exchange(server, head)
    assert status(got) == 431 and b"HEADERS_TOO_LARGE" in got  # was 200


def test_100000_headers_are_refused(server):
    head = b"GET /healthz HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(100_000)) + b"\r\n"
    assert status(exchange(server, head)) == 431  # was 200


def test_more_header_fields_than_the_bound_are_refused_even_when_small(server):
    head = b"GET /healthz HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(150)) + b"\r\n"
    got = exchange(server, head)
    assert len(head) < 4096 and status(got) == 431 and b"151 header fields" in got


def test_a_trickled_head_is_cut_after_the_header_deadline(server):
    with socket.create_connection(("127.0.0.1", server), timeout=15) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        got, closed_at = b"", None
        for i in range(40):  # one header line every 0.25 s, for 10 s unless cut
            try:
                s.sendall(b"X-%d: v\r\n" % i)
            except (BrokenPipeError, ConnectionResetError):
                closed_at = time.monotonic()
                break
            s.settimeout(0.25)
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                closed_at = time.monotonic()
                break
            got += chunk
            if not chunk:
                closed_at = time.monotonic()
                break
        assert closed_at is not None, "a trickling head was never cut"
        assert TIMEOUT - 0.3 <= closed_at - t0 <= TIMEOUT + 1.5
        assert status(got) == 408 and b"HEADER_TIMEOUT" in got


def test_a_silent_connection_is_closed_after_the_header_deadline(server):
    with socket.create_connection(("127.0.0.1", server), timeout=TIMEOUT + 5) as s:
        t0 = time.monotonic()
        assert s.recv(1) == b""  # closed, nothing sent
        assert time.monotonic() - t0 <= TIMEOUT + 1.5


def test_keep_alive_requests_each_get_the_deadline_afresh(server):
    # Two requests on one connection, the second started after longer than the deadline
    # measured from the connection's start: each head has its own clock.
    with socket.create_connection(("127.0.0.1", server), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        first = b""
        while not first.endswith(b'{"status":"ok"}'):  # head and body may come in two reads
            first += s.recv(65536)
        assert status(first) == 200
        time.sleep(TIMEOUT * 0.75)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        time.sleep(TIMEOUT * 0.5)
        s.sendall(b"Connection: close\r\n\r\n")
        assert status(s.recv(65536)) == 200


def test_a_body_in_the_same_read_as_a_small_head_is_not_counted_as_head(server):
    # One write of a small head and a 200 KB body: the read holds both, only the head counts.
    body = b'{"encoding": "hex", "items": [], "padding": "' + b"a" * 200_000 + b'"}'
    head = (b"POST /v1/verify HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    got = exchange(server, head + body)
    assert status(got) == 422 and b"HEADERS_TOO_LARGE" not in got  # the body was read and judged as a body
