"""GET /metrics: Prometheus text exposition (see app/api/metrics.py for what is exported)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.api import metrics
from app.api.deps import RuntimeDep

router = APIRouter(tags=["ops"])


@router.get("/metrics", response_class=Response,
                  responses={200: {"content": {"text/plain": {"example":
        'zapverify_signatures_total{backend="cpu",result="valid",scheme="ed25519"} 4.0\n'}}}})
async def prometheus_metrics(runtime: RuntimeDep) -> Response:
    """Prometheus metrics of every worker of this server (text format 0.0.4)."""
    # In a thread: in multiprocess mode it reads files.
    body, content_type = await run_in_threadpool(metrics.exposition, runtime, runtime.admission, runtime.ws)
    return Response(body, media_type=content_type)


# HEAD for probes and load balancers: the GET handler, the body dropped by the server; kept
# out of the schema so each path keeps one documented operation.
router.add_api_route("/metrics", prometheus_metrics, methods=["HEAD"], include_in_schema=False)
