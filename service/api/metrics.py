"""GET /metrics: the Prometheus text of the process's metrics (service/metrics.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"}},
)
def metrics(request: Request) -> Response:
    """Prometheus metrics: Triton's counters under Triton's names, plus latency, queue, compute and batch-size
    histograms and the models by state."""
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
