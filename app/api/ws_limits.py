"""WebSocket messages bounded while they arrive, not after (docs/operations.md, "Load shedding").

uvicorn's WebSocket protocol (websockets' sans-I/O parser) buffers a whole message before the
application sees it, up to one ``ws_max_size`` for every kind of message: 256 MiB here, the
largest ZAP frame.  The route then refused a JSON text message over the 64 MiB body limit, but
only once it had been held whole: six connections each sending one 120 MiB text message took
the server to 1.6 GiB.

:class:`LimitedWebSocketProtocol` is that protocol with the frame headers read as the bytes
come (RFC 6455 §5.2: the header says the opcode and the payload length before the payload),
so that:

* a **text** message whose frames add up to more than ``max_body_bytes`` (the JSON body
  limit) is refused at the header that passes the limit, before its payload is buffered:
  close 1009 (Message Too Big, RFC 6455 §7.4.1);
* every data message is charged to the process's admission bound (app/engine/admission.py)
  as its payload bytes arrive, the same ticket rules as an HTTP body: refused (a new message
  while the bound is full, or one growing past its share while others wait) with close 1013
  (Try Again Later).  The memory bounds only: a message is not refused here for the estimated
  wait, which the route answers per request (``OVERLOADED`` with ``retry_after``) on an open
  connection.  The charge ends when the message is handed to the application, which
  charges it again as a request (app/api/routes/ws.py);
* binary (ZAP) messages keep the protocol's own bound, ``ws_max_size``;
* a message half received has the read deadline of an HTTP body (app/api/slowbody.py): no
  byte for ``body_read_timeout_seconds``, or under ``body_min_bytes_per_second`` on average
  after that grace, and it is cut with close 1008 (Policy Violation).  An idle connection
  between messages holds nothing and is not cut.

Compression (permessage-deflate) is turned off by ``zapverify serve``: with it, a frame's
length on the wire would not be the size of what it inflates to.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from app.core.deadline import read_deadline
from app.core.errors import Overloaded

__all__ = ["ADMISSION_STATE", "PROTOCOL", "LimitedWebSocketProtocol"]

#: The value of uvicorn's ``ws`` option that selects this protocol (an import string).
PROTOCOL = "app.api.ws_limits:LimitedWebSocketProtocol"
#: Key of the process's :class:`app.engine.admission.Admission` in the lifespan state.
ADMISSION_STATE = "zapverify.admission"

log = logging.getLogger("zapverify.ws")

_TEXT, _BINARY, _CONT = 0x1, 0x2, 0x0
#: Close codes (RFC 6455 §7.4.1, IANA registry), used here and by the route (app/api/routes/ws.py).
INVALID_DATA, POLICY_VIOLATION, TOO_BIG, TRY_AGAIN_LATER = 1007, 1008, 1009, 1013


def close_reason(text: str) -> str:
    """``text`` cut to the 123 bytes of UTF-8 a close frame's reason may hold."""
    return text.encode()[:120].decode(errors="ignore")


class LimitedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol with the bounds of the module doc."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        from app.config import get_settings  # the settings of this process, as app/api/http_limits.py reads them

        settings = get_settings()
        self.max_text = settings.max_body_bytes
        self.timeout, self.min_rate = settings.body_read_timeout_seconds, settings.body_min_bytes_per_second
        self.admission = app_state.get(ADMISSION_STATE)
        self._head = bytearray()  # a frame header not yet whole
        self._payload_left = 0  # payload bytes of the current frame still to come
        self._data_frame = False  # whether the current frame belongs to a data message
        self._message: int | None = None  # opcode of the message in progress (text or binary)
        self._message_bytes = 0  # its payload so far, declared by its frames' headers
        self._final = False  # the current frame ends its message
        self._fin, self._opcode, self._length = False, 0, 0  # the last header read
        self._ticket: Any = None
        self._started = self._last = 0.0  # when the message in progress began, and its last byte came
        self._received = 0  # its payload bytes so far
        self._timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ the frame headers
    def data_received(self, data: bytes) -> None:
        # Before the opening handshake is answered the bytes are the HTTP request (a client
        # sends no frame before the 101, RFC 6455 §4.1), and once closing nothing is bounded.
        if self.handshake_complete and not self.close_sent and not self._track(data):
            return
        super().data_received(data)

    def _track(self, data: bytes) -> bool:
        """Follow the frames in ``data``; False when the connection was refused.

        A message ends (its charge released, its read deadline disarmed) as soon as the
        payload of its final frame is complete, wherever that falls in the read: one read
        can hold a message's end and then a ping or the next message.  Ending it only when a
        read's last frame completed it left it "in progress" behind a keep-alive ping (cut
        as stalled 30 s later, close 1008) and let back-to-back messages pile onto one
        admission charge until the bound refused it (close 1013): issue 53's soak close."""
        view, i = memoryview(data), 0
        while i < len(view):
            if self._payload_left:
                n = min(self._payload_left, len(view) - i)
                self._payload_left -= n
                i += n
                if self._data_frame:
                    self._last, self._received = self.loop.time(), self._received + n
                    if not self._charge(n):
                        return False
            else:
                before = len(self._head)
                self._head += view[i:i + 14 - before]  # 14: the longest header
                size = self._header()
                if size is None:  # the rest of the header comes in a later read
                    return True
                i += size - before  # what this read gave of the header; the rest is payload
                self._head.clear()
                if not self._frame_started():
                    return False
            if self._final and self._payload_left == 0:  # the message is whole: the application's now
                self._end_message()
        return True

    def _header(self) -> int | None:
        """The whole header's length once :attr:`_head` holds it (and its fields parsed into
        :attr:`_opcode`, :attr:`_length`, :attr:`_fin`), else None."""
        head = self._head
        if len(head) < 2:
            return None
        short = head[1] & 0x7F
        size = 2 + (2 if short == 126 else 8 if short == 127 else 0) + (4 if head[1] & 0x80 else 0)
        if len(head) < size:
            return None
        if short == 126:
            length = int.from_bytes(head[2:4], "big")
        elif short == 127:
            length = int.from_bytes(head[2:10], "big")
        else:
            length = short
        self._fin, self._opcode, self._length = bool(head[0] & 0x80), head[0] & 0x0F, length
        return size

    def _frame_started(self) -> bool:
        """A whole header was read: check and charge the frame; False when refused."""
        opcode, length = self._opcode, self._length
        self._payload_left = length
        self._data_frame = opcode in (_TEXT, _BINARY, _CONT)
        self._final = False
        if not self._data_frame:  # control frames (≤ 125 bytes) between a message's frames
            return True
        if opcode != _CONT:
            self._message, self._message_bytes = opcode, 0
            self._started = self._last = self.loop.time()
            self._received = 0
            self._arm(self.timeout)
        self._message_bytes += length
        if self._message == _TEXT and self._message_bytes > self.max_text:
            return self._refuse(TOO_BIG, f"text message over {self.max_text} bytes (settings.max_body_bytes)")
        if self._ticket is None and self.admission is not None:
            try:
                # The memory bounds only (admit applies no deadline): a message refused for
                # its time would close the whole connection (every request in flight on it
                # lost) where HTTP answers one request 503.  The route charges it again as a
                # request and answers OVERLOADED naming its request_id, the connection kept.
                self._ticket = self.admission.admit()
            except Overloaded as exc:
                return self._refuse(TRY_AGAIN_LATER, exc.message[:100])
        self._final = self._fin
        return True

    def _charge(self, n: int) -> bool:
        if self._ticket is None:
            return True
        try:
            self._ticket.add(nbytes=n)
        except Overloaded as exc:
            return self._refuse(TRY_AGAIN_LATER, exc.message[:100])
        return True

    # ------------------------------------------------------------------ the read deadline
    def _arm(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(max(0.0, delay), self._check_deadline)

    def _check_deadline(self) -> None:
        self._timer = None
        if self._message is None or self.close_sent or self.transport.is_closing():
            return
        deadline = read_deadline(self._started, self._last, self._received, self.timeout, self.min_rate)
        now = self.loop.time()
        if now < deadline:
            self._arm(deadline - now)
            return
        rate = f" or under {self.min_rate:g} bytes/s" if self.min_rate > 0 else ""
        self._refuse(POLICY_VIOLATION, f"message stalled after {self._received} bytes (no bytes for "
                                       f"{self.timeout:g} s{rate})")

    def _end_message(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._final = False
        self._message = None
        if self._ticket is not None:
            self._ticket.release()
            self._ticket = None

    def _refuse(self, code: int, reason: str) -> bool:
        """Close with ``code`` (the reason's length within a control frame's 123 bytes); logged
        at warning with the peer: the server ending a client's connection is an operator's
        business (issue 53: a soak's close left nothing above info)."""
        peer = self.client[0] if self.client else "?"
        log.warning("WebSocket from %s closed by the server with %d: %s", peer, code, reason)
        self._end_message()
        self.conn.fail(code, close_reason(reason))
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.transport.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_message()
        super().connection_lost(exc)
