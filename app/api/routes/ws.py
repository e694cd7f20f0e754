"""WebSocket /v1/ws/verify: pipelined verify requests on one connection.

A binary message is one ZAP request frame and gets a ZAP frame back (response or error)
carrying the frame's ``request_id``.  A text message is the JSON of ``POST /v1/verify`` —
or of ``POST /v1/verify/bls-aggregate``, recognised by items that carry a ``mode`` — plus a
``request_id`` (integer ≥ 0 or string of at most 128 characters), and gets the JSON answer
of that route plus the same ``request_id``, or ``{"request_id": ..., "error": {code,
message, field[, retry_after]}}``.

Requests are verified concurrently and replies go out as each finishes, so they may come
back in another order than sent: match them by ``request_id``.  At most
``ws_max_in_flight`` requests of one connection are between "read" and "reply sent"; at
the bound the server stops reading, so a client that sends faster than it is served — or
never reads its replies, which blocks the server's sends — is held back by TCP flow control
instead of growing the server's memory.

Each message, before anything else is done with it:

- takes a token of its key's rate limit (app/api/security.py; the connection took one
  too): without one the answer is ``RATE_LIMITED`` with ``retry_after`` seconds (a ZAP
  error frame, wire code 0x0022, for a binary message);
- a text message is held to ``max_body_bytes``, the limit of HTTP JSON bodies (counted in
  characters, as received): beyond it ``LIMIT_EXCEEDED``, before it is parsed;
- is charged to the process's admission bound (app/api/admission.py) — a text message its
  length before it is parsed, then its items — and beyond the bound gets ``OVERLOADED``
  (wire code 0x0105) with ``retry_after``.

Every error reply names the request it answers.  A text message's ``request_id`` is read
from the parsed JSON; when the message is not parsed (too big, refused) or cannot be
(not JSON, nested past the parser's depth), it is still read if ``"request_id"`` is the
object's first key, or from a full parse of a message of at most :data:`PEEK_PARSE_CHARS`
(which finds it only in well-formed JSON: a refused message, never a broken one).
A text message whose id cannot be read is not answered: the server stops reading, sends
the replies of the requests still in flight, and closes the connection with code 1009
(over the size limit), 1007 (not JSON), 1013 (rate limited or overloaded: try again later)
or 1008 (any other error, e.g. no valid ``request_id``), the reason ``"CODE: message"``.
A binary message that is not a frame gets an error frame with id 0; the connection stays
open after every error that is answered.

A binary message is copied once into the runtime's UMA pool and verified there.  When
receipts are on, each request's receipt (source ``ws``) is written before its reply.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Mapping
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, WebSocket
from pydantic import Field, ValidationError

from app.api.bls_aggregate import BlsAggregateRequest
from app.api.deps import RuntimeDep
from app.api.landing import landing
from app.api.schemas import VerifyRequest, loc_to_field
from app.api.security import message_rate
from app.api.service import verify_bls_aggregate, verify_frame, verify_json
from app.api.ws_limits import INVALID_DATA, POLICY_VIOLATION, TOO_BIG, TRY_AGAIN_LATER, close_reason
from app.core.errors import BadSize, LimitExceeded, Overloaded, RateLimited, RequestError, ZapVerifyError
from app.engine.configs import zap_limits
from app.engine.runtime import Runtime
from app.engine.stats import WsStats
from app.wire import zap

log = logging.getLogger("zapverify.ws")
router = APIRouter(prefix="/v1", tags=["verify"])

RequestId = int | str


class WsVerifyRequest(VerifyRequest):
    """A text message: the body of ``POST /v1/verify`` with the id its reply will carry."""

    request_id: Annotated[int, Field(ge=0)] | Annotated[str, Field(max_length=128)] = Field(
        description="echoed in the reply; an integer ≥ 0 or a string of at most 128 characters")


class WsBlsAggregateRequest(BlsAggregateRequest):
    """A text message: the body of ``POST /v1/verify/bls-aggregate`` with its ``request_id``."""

    request_id: Annotated[int, Field(ge=0)] | Annotated[str, Field(max_length=128)] = Field(
        description="echoed in the reply; an integer ≥ 0 or a string of at most 128 characters")


def _is_aggregate(data: object) -> bool:
    """A JSON request whose items carry a ``mode`` is a BLS aggregate request."""
    items = data.get("items") if isinstance(data, dict) else None
    return isinstance(items, list) and any(isinstance(it, dict) and "mode" in it for it in items)


#: A text message of at most this many characters is parsed whole to find the ``request_id``
#: of a refusal (rate limit, overload) when ``"request_id"`` is not its first key.
PEEK_PARSE_CHARS = 64 * 1024

_FIRST_KEY = re.compile(r'\s*\{\s*"request_id"\s*:\s*')
_DECODER = json.JSONDecoder()

#: Close codes for a text message whose id cannot be read (the protocol's: app/api/ws_limits.py).
CLOSE_POLICY, CLOSE_INVALID, CLOSE_TOO_BIG, CLOSE_TRY_LATER = POLICY_VIOLATION, INVALID_DATA, TOO_BIG, TRY_AGAIN_LATER


def _json_request_id(data: object) -> RequestId | None:
    rid = data.get("request_id") if isinstance(data, dict) else None
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        return None
    if isinstance(rid, int) and rid < 0 or isinstance(rid, str) and len(rid) > 128:
        return None
    return rid


def peek_request_id(text: str, *, parse_up_to: int = PEEK_PARSE_CHARS) -> RequestId | None:
    """The ``request_id`` of a text message that is not (or cannot be) parsed whole: the value
    of ``"request_id"`` when it is the object's first key, else, for a message of at most
    ``parse_up_to`` characters, that of a full parse.  None when it cannot be read; never raises."""
    m = _FIRST_KEY.match(text)
    if m is not None:
        try:
            value, _ = _DECODER.raw_decode(text, m.end())
        except (ValueError, RecursionError):
            value = None
        rid = _json_request_id({"request_id": value})
        if rid is not None:
            return rid
    if len(text) <= parse_up_to:
        try:
            return _json_request_id(json.loads(text))
        except (ValueError, RecursionError):
            return None
    return None


def _parse(text: str) -> object:
    """The JSON of a text message; :class:`RequestError` ``BAD_JSON`` for text that is not JSON
    or is nested past the parser's depth (``RecursionError``, which HTTP answers 422 too)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise RequestError("text message is not readable JSON (nested too deeply)", field="body",
                           code="BAD_JSON") from None
    except ValueError as exc:
        raise RequestError(f"text message is not JSON ({exc})"[:200], field="body", code="BAD_JSON") from None


def _error_body(exc: ZapVerifyError) -> dict:
    body = exc.to_dict()
    if exc.retry_after is not None:
        # Never 0: a token due in under half a millisecond still means "not yet" (a client that
        # retried at once on 0.0 would be refused again).
        body["retry_after"] = max(0.001, round(exc.retry_after, 3))
    return body


def _close_code(exc: ZapVerifyError) -> int:
    if isinstance(exc, LimitExceeded) and exc.field == "body":
        return CLOSE_TOO_BIG
    if exc.code == "BAD_JSON":
        return CLOSE_INVALID
    if isinstance(exc, (RateLimited, Overloaded)):
        return CLOSE_TRY_LATER
    return CLOSE_POLICY


class _Unanswerable(Exception):
    """A text message's error cannot name its request: the connection is closed with ``code``."""

    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


class Connection:
    """One accepted WebSocket: a reader loop bounded by a semaphore and one task per request."""

    def __init__(self, ws: WebSocket, runtime: Runtime):
        self.ws = ws
        self.runtime = runtime
        self.engine = runtime.engine
        self.settings = runtime.settings
        self.store = runtime.store
        self.stats: WsStats = runtime.ws
        self.limits = zap_limits(self.settings)
        self.admission = runtime.admission
        self.rate = message_rate(ws.scope)
        self.max_text = self.settings.max_body_bytes
        self.bound = self.settings.ws_max_in_flight
        self.slots = asyncio.Semaphore(self.bound)
        self.send_lock = asyncio.Lock()
        self.in_flight = 0
        self.tasks: set[asyncio.Task] = set()
        #: set once a message could not be answered: nothing more is read or served
        self.closing = False

    async def run(self) -> None:
        await self.ws.accept()
        self.stats.connections += 1
        self.stats.connections_total += 1
        try:
            while True:
                # A slot is taken before reading: at the bound, nothing more is read.
                await self.slots.acquire()
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    self.slots.release()
                    return
                if self.closing:  # the close is on its way; what the peer sent meanwhile is dropped
                    self.slots.release()
                    continue
                self._started()
                task = asyncio.create_task(self._serve(message))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        finally:
            for task in list(self.tasks):
                task.cancel()
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
            self.stats.connections -= 1

    def _started(self) -> None:
        self.in_flight += 1
        self.stats.in_flight += 1
        self.stats.messages_total += 1
        self.stats.in_flight_peak = max(self.stats.in_flight_peak, self.in_flight)

    def _finished(self) -> None:
        self.in_flight -= 1
        self.stats.in_flight -= 1
        self.slots.release()

    async def _serve(self, message: Mapping[str, Any]) -> None:
        try:
            data = message.get("bytes")
            if data is not None:
                reply = await self._zap(data)
                async with self.send_lock:
                    await self.ws.send_bytes(reply)
            else:
                reply_text = await self._json(message.get("text") or "")
                async with self.send_lock:
                    await self.ws.send_text(reply_text)
        except asyncio.CancelledError:
            raise
        except _Unanswerable as exc:
            await self._close(exc.code, exc.reason)
        except Exception as exc:  # the peer went away mid-send; the reader loop sees the disconnect
            log.debug("websocket reply not sent: %s", exc)
        finally:
            self._finished()

    async def _close(self, code: int, reason: str) -> None:
        """Stop reading, let the requests in flight send their replies, then close with ``code``."""
        if self.closing:
            return  # another message's close is already on its way
        self.closing = True
        others = [t for t in self.tasks if t is not asyncio.current_task()]
        await asyncio.gather(*others, return_exceptions=True)
        log.warning("websocket closed by the server with %d: %s", code, reason)
        try:
            async with self.send_lock:
                await self.ws.close(code, close_reason(reason))
        except Exception as exc:  # already gone
            log.debug("websocket close not sent: %s", exc)

    def _take_token(self) -> None:
        """One token of the key's rate limit for this message; raises :class:`RateLimited`."""
        if self.rate is None:
            return
        wait = self.rate()
        if wait > 0:
            raise RateLimited(f"rate limit of this connection's key; retry in {wait:.2f} s", retry_after=wait)

    async def _zap(self, data: bytes) -> bytes:
        t0 = time.perf_counter()
        request_id = zap.peek_request_id(data)
        try:
            self._take_token()
            header = zap.read_header(data, self.limits)
            if header.size != len(data):
                raise BadSize(f"size field says {header.size} bytes, the message has {len(data)}", field="size")
            # The message is copied once, into pool memory the engine (and a GPU) reads in place.
            with self.admission.admit(nbytes=len(data)) as ticket:
                async with landing(self.runtime.pool, len(data)) as buf:
                    buf[:len(data)] = np.frombuffer(data, dtype=np.uint8)
                    _, reply = await verify_frame(self.engine, self.store, buf[:len(data)], self.limits,
                                                  source="ws", started=t0, ticket=ticket)
            self.runtime.stats.record_frame("ws", "accepted")
            return reply
        except ZapVerifyError as exc:
            self.stats.errors_total += 1
            self.runtime.stats.record_frame("ws", exc.code.lower())
            return bytes(zap.error_frame(exc, request_id))

    async def _json(self, text: str) -> str:
        """The reply to one text message; raises :class:`_Unanswerable` for an error whose
        request cannot be named."""
        t0 = time.perf_counter()
        request_id: RequestId | None = None
        parsed = False
        try:
            self._take_token()
            if len(text) > self.max_text:
                raise LimitExceeded(f"text message of {len(text)} characters is over the {self.max_text}-byte "
                                    "limit of JSON bodies (settings.max_body_bytes)", field="body")
            # Charged before it is parsed: parsing costs several times the text's size in memory.
            with self.admission.admit(nbytes=len(text)) as ticket:
                data = _parse(text)
                parsed = True
                request_id = _json_request_id(data)
                if request_id is None:
                    raise RequestError("request_id is missing or not an integer >= 0 or a string of at most "
                                       "128 characters", field="request_id")
                aggregate = _is_aggregate(data)
                try:
                    req = (WsBlsAggregateRequest if aggregate else WsVerifyRequest).model_validate(data)
                except ValidationError as exc:
                    first = exc.errors()[0]
                    raise RequestError(str(first.get("msg")),
                                       field=loc_to_field(tuple(first.get("loc", ())))) from None
                if isinstance(req, WsBlsAggregateRequest):
                    response = await verify_bls_aggregate(self.engine, self.store, self.settings, req, source="ws",
                                                          started=t0, ticket=ticket)
                else:
                    response = await verify_json(self.engine, self.store, self.settings, req, source="ws",
                                                 started=t0, ticket=ticket)
            body = response.model_dump()
            return json.dumps({"request_id": req.request_id, **body})
        except ZapVerifyError as exc:
            self.stats.errors_total += 1
            if request_id is None and not parsed:
                # Never a whole parse of a text over the limit: that is what the limit prevents.
                request_id = peek_request_id(text, parse_up_to=PEEK_PARSE_CHARS if len(text) <= self.max_text else 0)
            if request_id is None:
                raise _Unanswerable(_close_code(exc), f"{exc.code}: {exc.message}") from None
            return json.dumps({"request_id": request_id, "error": _error_body(exc)})


@router.websocket("/ws/verify")
async def ws_verify(websocket: WebSocket, runtime: RuntimeDep) -> None:
    """Pipelined verification over one WebSocket (see the module doc for the protocol)."""
    await Connection(websocket, runtime).run()
