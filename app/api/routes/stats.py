"""WebSocket /v1/ws/stats: the status snapshot pushed every second (the live dashboard's feed)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from app.api.deps import RuntimeDep
from app.api.status import status_body
from app.api.workers import merge_pools
from app.engine.runtime import Runtime

router = APIRouter(tags=["ops"])

#: Seconds between two snapshots.
PUSH_SECONDS = 1.0


async def snapshot(runtime: Runtime) -> dict:
    """What GET /v1/status answers, plus ``time`` (server clock, seconds since the epoch) and
    ``receipts`` (whether the batches listed have receipts).  With several workers, the
    stats already cover all of them and ``pool`` becomes the sum of their pools."""
    body = status_body(runtime)
    exchange = runtime.exchange
    if exchange is not None and body.get("pool") is not None:
        peers = await asyncio.to_thread(exchange.peers)
        body["pool"] = merge_pools([body["pool"], *(p.get("pool") for p in peers)])
    return {**body, "time": time.time(), "receipts": runtime.settings.receipts}


@router.websocket("/v1/ws/stats")
async def stats_feed(ws: WebSocket, runtime: RuntimeDep) -> None:
    """Sends one JSON snapshot (as GET /v1/status, plus ``time`` and ``receipts``) at once
    and then every second, until the client goes away or the server shuts down.
    Messages from the client are read and ignored."""
    await ws.accept()

    async def push() -> None:
        while True:
            await ws.send_json(await snapshot(runtime))
            await asyncio.sleep(PUSH_SECONDS)

    async def drain() -> None:
        while (await ws.receive())["type"] != "websocket.disconnect":
            pass

    tasks = [asyncio.create_task(push()), asyncio.create_task(drain())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError, OSError):
                await t
