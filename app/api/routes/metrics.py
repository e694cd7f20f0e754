"""GET /metrics: Prometheus text exposition (see app/api/metrics.py for what is exported)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.api import metrics
from app.api.deps import get_runtime
from app.engine.runtime import Runtime

router = APIRouter(tags=["ops"])


@router.get("/metrics", response_class=Response,
                  responses={200: {"content": {"text/plain": {"example":
        'zapverify_signatures_total{backend="cpu",result="valid",scheme="ed25519"} 4.0\n'}}}})
async def prometheus_metrics(request: Request, runtime: Runtime = Depends(get_runtime)) -> Response:
    """Prometheus metrics of every worker of this server (text format 0.0.4)."""
    # In a thread: in multiprocess mode it reads files.
    state = request.app.state
    body, content_type = await run_in_threadpool(metrics.exposition, runtime, getattr(state, "admission", None),
                                                 getattr(state, "ws_stats", None))
    return Response(body, media_type=content_type)


# HEAD for probes and load balancers: the GET handler, the body dropped by the server; kept
# out of the schema so each path keeps one documented operation.
router.add_api_route("/metrics", prometheus_metrics, methods=["HEAD"], include_in_schema=False)
