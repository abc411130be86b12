"""The inference routes without FastAPI's request machinery: the same endpoints, reached directly.

The protocol modules declare which endpoints are hot, and how to call them with the path parameters
(service/api/hotroutes.py); this module finds the declarations on the app's routes with the `find` it is given
(`hot_call`, passed by service/app.py, so that the server never imports a protocol module). `HotRoutes` is the
innermost of the app's middlewares: inside the drain, the metrics, the restricted API
groups and the body guards, which all still apply. For `POST /v1/models/{name}/query`,
`POST /v1/models/{name}/classify` without a query string and `POST /v2/models/{name}[/versions/{version}]/infer`,
with a name FastAPI would accept (`ModelName`: at most NAME_MAX characters), it calls the route's own endpoint
function with the path parameters, under Starlette's `ExceptionMiddleware` built from the app's own exception
handlers, so that every error becomes the same response as on FastAPI's path. It leaves out what those
routes do not need: the router's walk over some fifty routes, FastAPI's parameter solving (the name is the
only parameter, and `include_input` of classify is absent, so its default applies) and two
`AsyncExitStack`s (no dependency has a `yield`, no body is a form FastAPI parses). Everything else — other
methods, trailing slashes, long names, a query string on classify — goes to FastAPI as before, which answers
it as before. The OpenAPI document is FastAPI's, from the same routes. The matching regexes and convertors
are the routes' own (`iter_route_contexts`), and `scope` gets the `route`, `endpoint` and `path_params`
that Starlette's router would set, so that the metrics label the request with its route template.

In the profile of one-digit classify at one client, what this skips was about a sixth of the event
loop's samples (docs/benchmarks.md, floor).
"""

from __future__ import annotations

from typing import Any, Callable

from fastapi.routing import iter_route_contexts
from starlette._utils import get_route_path
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from modelrepo import NAME_MAX


class HotRoutes:
    def __init__(self, app: ASGIApp, find: Callable[[Any], tuple[Callable, bool] | None]):
        """`find(endpoint)`: the (call, bare) an endpoint was declared hot with, or None."""
        self.app = app
        self.find = find
        self.table: list[tuple[Any, Any, Callable, bool]] | None = None
        self.handled: ExceptionMiddleware | None = None

    def build(self, fastapi_app) -> None:
        """The hot routes' regexes, in routing order, and the app's exception handlers as FastAPI installs them."""
        table = []
        for ctx in iter_route_contexts(fastapi_app.routes):
            hot = self.find(getattr(ctx, "endpoint", None))
            if hot is not None and ctx.methods and "POST" in ctx.methods:
                table.append((ctx.path_regex, ctx, *hot))
        handlers = {k: v for k, v in fastapi_app.exception_handlers.items() if k not in (500, Exception)}
        self.handled = ExceptionMiddleware(self.run, handlers=handlers, debug=fastapi_app.debug)
        self.table = table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            if self.table is None:
                self.build(scope["app"])
            path = get_route_path(scope)  # as Starlette's router matches
            for regex, ctx, call, bare in self.table:
                match = regex.match(path)
                if match is None:
                    continue
                params = {k: ctx.param_convertors[k].convert(v) for k, v in match.groupdict().items()}
                if len(params["name"]) > NAME_MAX or (bare and scope.get("query_string")):
                    break  # FastAPI's answer (a 422 naming the parameter, or the query parameters' values)
                scope.update(route=ctx, endpoint=ctx.endpoint, path_params=params, **{"inr.hot_call": call})
                return await self.handled(scope, receive, send)
        await self.app(scope, receive, send)

    @staticmethod
    async def run(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        response = await scope["inr.hot_call"](request, scope["path_params"])
        await response(scope, receive, send)
