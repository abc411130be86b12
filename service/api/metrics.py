"""GET /metrics: the Prometheus text of the process's metrics (service/metrics/), as the caller may see it."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from modelrepo.access import RESTRICTED, Access

from ..auth.caching import cache_control
from ..auth.policy import Caller
from ..errors import ServiceError
from .deps import get_caller

router = APIRouter(tags=["metrics"])
MODEL_LABEL = re.compile(rb'[{,]model="([^"]*)"')


def visible(text: bytes, caller: Caller, registry) -> bytes:
    """The exposition without the samples of models the caller may not read (a restricted model's name, its
    request counts and latencies are not told to an anonymous scraper; a model no longer in the repository counts
    as restricted). A scraper with a token or key that may read them (Prometheus's `authorization`) sees them."""
    allowed: dict[bytes, bool] = {b"": True}

    def keep(line: bytes) -> bool:
        m = MODEL_LABEL.search(line)
        if m is None:
            return True
        name = m.group(1)
        if name not in allowed:
            text_name = name.decode()
            try:
                access = registry.access_of(text_name) or Access(RESTRICTED)
            except ServiceError:  # its policy cannot be read now (S3 not answering): as a restricted model
                access = Access(RESTRICTED)
            allowed[name] = caller.may_read(text_name, access, registry.access_default)
        return allowed[name]

    return b"\n".join(line for line in text.split(b"\n") if keep(line))


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"}},
)
def metrics(request: Request) -> Response:
    """Prometheus metrics: Triton's counters under Triton's names, plus latency, queue, compute and batch-size
    histograms and the models by state; a restricted model's samples only for a caller who may read it."""
    text = visible(request.app.state.metrics.exposition(), get_caller(request), request.app.state.registry)
    return Response(
        text, media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": cache_control(False, 0, per_caller=True)}
    )
