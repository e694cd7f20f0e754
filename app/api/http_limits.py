"""Bounds on HTTP request heads for a direct bind (docs/operations.md, "Running").

Behind nginx the proxy bounds request heads (``large_client_header_buffers``,
``client_header_timeout``); bound directly, uvicorn's default HTTP implementation
(httptools, picked when installed) buffers a head of any size and waits for it forever:
8 MiB headers and 100,000 headers were answered, 32 MiB unfinished heads took RSS up by
half a GiB, and connections trickling header lines were never closed.

:class:`LimitedH11Protocol` is uvicorn's h11 protocol (pure Python, already a dependency
of uvicorn) with three bounds added, from the settings (``ZAPVERIFY_MAX_HEADER_BYTES``,
``ZAPVERIFY_MAX_HEADER_COUNT``, ``ZAPVERIFY_HEADER_TIMEOUT_SECONDS``):

* a head (request line + headers) larger than ``max_header_bytes`` is answered 431 and the
  connection closed, as soon as that many bytes are buffered (h11's own
  ``max_incomplete_event_size`` is set to the same bound, but it is only checked while
  the head is incomplete, so a larger head arriving in one read would pass it);
* a request with more than ``max_header_count`` header fields is answered 431 before the
  application sees it;
* a head not complete within ``header_timeout_seconds`` of its first byte (or of the
  connection being opened) is cut: 408 if part of it arrived, else just closed.  Idle
  keep-alive connections stay under uvicorn's ``timeout_keep_alive``.

h11 was chosen over a second ASGI server (hypercorn has the same knobs) because uvicorn's
protocol classes are its documented extension point (``Config(http=...)``), the rest of
the serving path (lifespan, workers, graceful shutdown, WebSocket upgrade) is unchanged,
and h11 parses incrementally, so the size bound applies while bytes arrive.  The cost:
h11 parses in Python, slower per request than httptools; heads are small next to the
signature batches this service verifies.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: The value of uvicorn's ``http`` option that selects this protocol (an import string, so
#: each worker process imports it).
PROTOCOL = "app.api.http_limits:LimitedH11Protocol"


@dataclass(frozen=True)
class HeaderLimits:
    """``max_bytes``: bytes of a request head; ``max_count``: header fields;
    ``timeout_seconds``: time for a whole head."""

    max_bytes: int = 64 * 1024
    max_count: int = 100
    timeout_seconds: float = 10.0


@lru_cache
def header_limits() -> HeaderLimits:
    """The limits from the settings (read once per process: the protocol is made per connection)."""
    from app.config import get_settings

    s = get_settings()
    return HeaderLimits(s.max_header_bytes, s.max_header_count, s.header_timeout_seconds)


def _error_body(message: str, code: str = "HEADERS_TOO_LARGE") -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "field": "headers"}}).encode()


def _raw_response(status: int, reason: str, body: bytes) -> bytes:
    """A whole HTTP/1.1 response that closes the connection (written as bytes: h11 cannot
    send a response for a request it never finished reading)."""
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode("ascii") + body


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the head bounds of :func:`header_limits` (module doc)."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, limits: HeaderLimits | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits or header_limits()
        self._head_timer: asyncio.TimerHandle | None = None
        self.app = _count_guard(self.app, self.limits.max_count)

    # ------------------------------------------------------------------ the head deadline
    def _reading_head(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.timeout_seconds, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._reading_head():
            return
        if self.conn.trailing_data[0]:  # part of a head arrived: say why it is cut
            self.logger.warning("request head not complete within %.1f s: connection closed",
                                self.limits.timeout_seconds)
            self.transport.write(_raw_response(408, "Request Timeout", _error_body(
                f"the request head was not complete within {self.limits.timeout_seconds:g} s",
                code="HEADER_TIMEOUT")))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing is a head that never completes

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    # ------------------------------------------------------------------ the size bound
    def _head_over_bound(self, data: bytes) -> bool:
        """Whether the head being read, with ``data`` added, is over the bound.  Only the head
        counts: one read may also hold the start of the body (or of a pipelined request), so
        what is buffered is over the bound only when no end of head (CRLF CRLF) falls within it."""
        limit = self.limits.max_bytes
        # The buffer's length, not ``trailing_data`` (a copy of the whole buffer): this runs on
        # every read of a head, and a head trickled a byte per read would be copied each time.
        if len(self.conn._receive_buffer) + len(data) <= limit:
            return False
        joined = bytes(self.conn.trailing_data[0]) + data[: limit + 4]  # at most the bound and a marker
        end = joined.find(b"\r\n\r\n")
        return end < 0 or end + 4 > limit

    def data_received(self, data: bytes) -> None:
        if self._reading_head():
            if self._head_over_bound(data):
                self._too_large()
                return
            self._arm()  # the first byte of a keep-alive connection's next head starts its clock
        super().data_received(data)
        if not self._reading_head() or self.transport.is_closing():
            self._disarm()

    def _too_large(self) -> None:
        self._disarm()
        self.logger.warning("request head over %d bytes: 431, connection closed", self.limits.max_bytes)
        self.transport.write(_raw_response(431, "Request Header Fields Too Large", _error_body(
            f"the request head is over {self.limits.max_bytes} bytes")))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        # h11 refuses a head past max_incomplete_event_size as a protocol error: answer that 431.
        if len(self.conn.trailing_data[0]) > self.limits.max_bytes:
            self._too_large()
        else:
            super().send_400_response(msg)


def _count_guard(app: Any, max_count: int) -> Any:
    """``app`` refusing an HTTP request with more than ``max_count`` header fields (431)."""

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and len(scope["headers"]) > max_count:
            body = _error_body(f"{len(scope['headers'])} header fields; at most {max_count} are accepted")
            await send({"type": "http.response.start", "status": 431,
                        "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return guarded
