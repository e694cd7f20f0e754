"""GET /metrics: Prometheus text exposition (see app/api/metrics.py for what is exported)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.api import metrics
from app.api.deps import get_engine
from app.engine.verify.engine import Engine

router = APIRouter(tags=["ops"])


@router.api_route("/metrics", methods=["GET", "HEAD"], response_class=Response,
                  responses={200: {"content": {"text/plain": {"example":
        'zapverify_signatures_total{backend="cpu",result="valid",scheme="ed25519"} 4.0\n'}}}})
async def prometheus_metrics(engine: Engine = Depends(get_engine)) -> Response:
    """Prometheus metrics of every worker of this server (text format 0.0.4)."""
    body, content_type = await run_in_threadpool(metrics.exposition, engine)  # reads files in multiprocess mode
    return Response(body, media_type=content_type)
