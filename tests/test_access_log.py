"""No API key in the server's log (app/api/access_log.py): uvicorn's request lines and, at
debug level, the WebSocket handshake headers have every key redacted."""

from __future__ import annotations

import base64
import logging

import httpx
import pytest
from websockets.sync.client import connect

from app.api import access_log, security
from app.config import Settings
from app.engine.runtime import Runtime
from app.main import create_app
from tests.server import LiveServer


class _DebugServer(LiveServer):
    """:class:`tests.server.LiveServer` logging at ``debug``: every request line and handshake header."""

    def __init__(self, app):
        import threading

        import uvicorn

        super().__init__(app)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="debug"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

ADMIN_KEY = "zv-log-admin-key-0123456789abcdef"
KEYS = [f"{security.key_digest(ADMIN_KEY)}:verify+receipts+admin:ops"]


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def captured():
    handler = _Collect()
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    loggers = [logging.getLogger(n) for n in access_log.LOGGERS]
    levels = [lg.level for lg in loggers]
    yield handler, loggers
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


def test_a_real_server_logs_no_key(engine, captured):
    handler, loggers = captured
    app = create_app(Settings(api_keys=KEYS, receipts=False), runtime=Runtime(engine))
    # uvicorn configures its loggers (dictConfig) after the app exists here, before it in
    # `zapverify serve` (factory): the filter must survive that, and does.
    with _DebugServer(app) as srv:
        for lg in loggers:
            lg.addHandler(handler)
        r = httpx.get(f"{srv.url}/v1/status?access_token={ADMIN_KEY}&x=1", timeout=30)
        assert r.status_code == 200
        ws_url = srv.url.replace("http://", "ws://") + "/v1/ws/stats"
        with connect(f"{ws_url}?access_token={ADMIN_KEY}", open_timeout=30) as ws:  # the deprecated way
            assert "engine" in ws.recv(timeout=30)
        with connect(ws_url, subprotocols=[security.SUBPROTOCOL, security.subprotocol_key(ADMIN_KEY)],
                     additional_headers={"Authorization": f"Bearer {ADMIN_KEY}"}, open_timeout=30) as ws:
            assert ws.subprotocol == security.SUBPROTOCOL
            assert "engine" in ws.recv(timeout=30)
    text = "\n".join(handler.lines)
    encoded = base64.urlsafe_b64encode(ADMIN_KEY.encode()).rstrip(b"=").decode()
    assert ADMIN_KEY not in text and encoded not in text
    # The lines were logged, redacted: the access log and the WebSocket handshake line.
    assert '"GET /v1/status?access_token=REDACTED&x=1 HTTP/1.1" 200' in text
    assert '"WebSocket /v1/ws/stats?access_token=REDACTED" [accepted]' in text


def test_the_access_formatter_still_gets_its_five_arguments():
    from uvicorn.logging import AccessFormatter

    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", "/v1/x?a=1&access_token=s3cr3t&API_KEY=k2", "1.1", 200), None)
    assert access_log.RedactKeys().filter(record)
    line = AccessFormatter("%(client_addr)s %(request_line)s %(status_code)s", use_colors=False).format(record)
    assert line == '127.0.0.1:5 GET /v1/x?a=1&access_token=REDACTED&API_KEY=REDACTED HTTP/1.1 200 OK'


@pytest.mark.parametrize("args, want", [
    (("Authorization", "Bearer s3cr3t"), ("Authorization", "REDACTED")),
    (("X-API-Key", "s3cr3t"), ("X-API-Key", "REDACTED")),
    (("Sec-WebSocket-Protocol", "zapverify.v1, zapverify.key.czNjcjN0"),
     ("Sec-WebSocket-Protocol", "zapverify.v1, zapverify.key.REDACTED")),
    (("Host", "s3cr3t.example"), ("Host", "s3cr3t.example")),  # not a key: left alone
])
def test_handshake_header_dumps_are_redacted(args, want):
    record = logging.LogRecord("uvicorn.error", logging.DEBUG, __file__, 1, "< %s: %s", args, None)
    access_log.RedactKeys().filter(record)
    assert record.args == want


def test_install_is_idempotent():
    access_log.install()
    access_log.install()
    for name in access_log.LOGGERS:
        assert sum(isinstance(f, access_log.RedactKeys) for f in logging.getLogger(name).filters) == 1
