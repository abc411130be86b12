"""The HTTP requests' metrics, as pure ASGI: every request timed and counted by `Metrics` (service/metrics/),
labelled with its route template and its model."""

from __future__ import annotations

import time

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..metrics import Metrics


class MetricsMiddleware:
    """Times every HTTP request and labels it with its route template and model (known models only, so that
    made-up names in URLs cannot grow the label set; not for a request refused by model access, 401 or 403)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, known_models):
        self.app, self.metrics, self.known_models = app, metrics, known_models

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        code = 500

        async def send_status(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            endpoint, name, version = self._route(scope)
            # a refused request is counted without its model: no one learns a restricted name from the counts
            model = name if code not in (401, 403) and name in self.known_models() else ""
            self.metrics.request(model, endpoint, scope["method"], code, time.perf_counter() - start, version)

    def _route(self, scope: Scope) -> tuple[str, str, str]:
        route = scope.get("route")
        params = scope.get("path_params") or {}
        if route is None:  # answered before routing (e.g. 413 for the body size): match it here
            for r in scope["app"].router.routes:
                match, child = r.matches(scope)
                if match is Match.FULL:
                    route, params = r, child.get("path_params", {})
                    break
        path = getattr(route, "path", None)
        if not path:  # the static files mounted at "/", or no route at all
            return "other", "", ""
        return path, str(params.get("name", "")), str(params.get("version", ""))
