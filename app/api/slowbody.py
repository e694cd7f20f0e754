"""Slow and stalled request bodies (docs/operations.md, "Load shedding").

A client that opens a request and then sends its body slowly, or not at all, holds a
connection, an admission charge and pool memory for as long as it likes; it also kept a
server in "waiting for connections to close" after SIGTERM.  :class:`BodyDeadline` bounds
that: every ``receive`` of a body chunk must complete by

    min(last chunk + timeout,  start + timeout + received / min_rate)

i.e. no gap longer than ``timeout`` seconds, and, after a grace of ``timeout`` seconds, an
average rate of at least ``min_rate`` bytes per second (0 turns the rate off).  A body that
misses its deadline raises :class:`app.core.errors.BodyTimeout` (408, answered with
``Connection: close``) to whoever is reading it, as a body over the size limit does.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.deadline import read_deadline
from app.core.errors import BodyTimeout


class BodyDeadline:
    """ASGI middleware: the read deadline above on every HTTP request body."""

    def __init__(self, app: ASGIApp, timeout: float, min_rate: float = 0.0):
        self.app, self.timeout, self.min_rate = app, timeout, min_rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = last = time.monotonic()
        received = 0
        done = False

        async def timed() -> Message:
            nonlocal last, received, done
            if done:  # after the body: the wait for a disconnect is not a body read
                return await receive()
            deadline = read_deadline(start, last, received, self.timeout, self.min_rate)
            try:
                msg = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                rate = f" or under {self.min_rate:g} bytes/s" if self.min_rate > 0 else ""
                raise BodyTimeout(f"the request body stalled after {received} bytes (no bytes for "
                                  f"{self.timeout:g} s{rate})", field="body") from None
            if msg["type"] == "http.request":
                received += len(msg.get("body", b""))
                last = time.monotonic()
                done = not msg.get("more_body", False)
            return msg

        await self.app(scope, timed, send)
