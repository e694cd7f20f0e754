"""WebSocket /v1/ws/verify: pipelined verify requests on one connection.

A binary message is one ZAP request frame and gets a ZAP frame back (response or error)
carrying the frame's ``request_id``.  A text message is the JSON of ``POST /v1/verify`` —
or of ``POST /v1/verify/bls-aggregate``, recognised by items that carry a ``mode`` — plus a
``request_id`` (integer or string), and gets the JSON answer of that route plus the same
``request_id``, or ``{"request_id": ..., "error": {code, message, field}}``.

Requests are verified concurrently and replies go out as each finishes, so they may come
back in another order than sent: match them by ``request_id``.  At most
``ws_max_in_flight`` requests of one connection are between "read" and "reply sent"; at
the bound the server stops reading, so a client that sends faster than it is served — or
never reads its replies, which blocks the server's sends — is held back by TCP flow control
instead of growing the server's memory.  A bad message gets an error reply and the
connection stays open.

A binary message is copied once into the runtime's UMA pool and verified there.  Each
request is charged to the process's admission bound (app/api/admission.py); beyond it the
reply is an ``OVERLOADED`` error (wire code 0x0105) and the connection stays open.  When
receipts are on, each request's receipt (source ``ws``) is written before its reply.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, WebSocket
from pydantic import Field, ValidationError

from app.api.bls_aggregate import BlsAggregateRequest
from app.api.deps import zap_limits
from app.api.landing import landing
from app.api.schemas import VerifyRequest, loc_to_field
from app.api.service import verify_bls_aggregate, verify_frame, verify_json
from app.core.errors import BadSize, RequestError, ZapVerifyError
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


@dataclass
class WsStats:
    """Gauges and counters of the WebSocket endpoint, for /v1/status and the tests.

    ``in_flight_peak`` is the largest number of requests one connection has had in flight;
    it never exceeds ``ws_max_in_flight``.
    """

    connections: int = 0
    connections_total: int = 0
    in_flight: int = 0
    in_flight_peak: int = 0
    messages_total: int = 0
    errors_total: int = 0

    def snapshot(self) -> dict:
        return dict(self.__dict__)


def _json_request_id(data: object) -> RequestId | None:
    rid = data.get("request_id") if isinstance(data, dict) else None
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        return None
    if isinstance(rid, int) and rid < 0 or isinstance(rid, str) and len(rid) > 128:
        return None
    return rid


class Connection:
    """One accepted WebSocket: a reader loop bounded by a semaphore and one task per request."""

    def __init__(self, ws: WebSocket):
        app = ws.app
        self.ws = ws
        self.runtime = app.state.runtime
        self.engine = self.runtime.engine
        self.settings = app.state.settings
        self.store = self.runtime.store
        self.stats: WsStats = app.state.ws_stats
        self.limits = zap_limits(self.settings)
        self.admission = app.state.admission
        self.bound = self.settings.ws_max_in_flight
        self.slots = asyncio.Semaphore(self.bound)
        self.send_lock = asyncio.Lock()
        self.in_flight = 0
        self.tasks: set[asyncio.Task] = set()

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
        except Exception as exc:  # the peer went away mid-send; the reader loop sees the disconnect
            log.debug("websocket reply not sent: %s", exc)
        finally:
            self._finished()

    async def _zap(self, data: bytes) -> bytes:
        t0 = time.perf_counter()
        request_id = zap.peek_request_id(data)
        try:
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
        t0 = time.perf_counter()
        request_id: RequestId | None = None
        try:
            try:
                data = json.loads(text)
            except ValueError:
                raise RequestError("text message is not JSON", field="body", code="BAD_JSON") from None
            request_id = _json_request_id(data)
            aggregate = _is_aggregate(data)
            try:
                req = (WsBlsAggregateRequest if aggregate else WsVerifyRequest).model_validate(data)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise RequestError(str(first.get("msg")), field=loc_to_field(tuple(first.get("loc", ())))) from None
            with self.admission.admit(nbytes=len(text)) as ticket:
                if isinstance(req, WsBlsAggregateRequest):
                    response = await verify_bls_aggregate(self.engine, self.store, self.settings, req, source="ws",
                                                          started=t0)
                else:
                    response = await verify_json(self.engine, self.store, self.settings, req, source="ws",
                                                 started=t0, ticket=ticket)
            body = response.model_dump()
            return json.dumps({"request_id": req.request_id, **body})
        except ZapVerifyError as exc:
            self.stats.errors_total += 1
            return json.dumps({"request_id": request_id, "error": exc.to_dict()})


@router.websocket("/ws/verify")
async def ws_verify(websocket: WebSocket) -> None:
    """Pipelined verification over one WebSocket (see the module doc for the protocol)."""
    await Connection(websocket).run()
