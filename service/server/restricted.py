"""The restricted API groups over HTTP (service/auth/restricted.py): a request to an API of a restricted group without
its header gets 403 `{"error": ...}` before any route runs or its body is read."""

from __future__ import annotations

import re

from fastapi.routing import iter_route_contexts
from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth.restricted import RestrictedGroup, carries_key, group_of
from ..errors import Forbidden, error_response


def route_table(routes) -> list[tuple[re.Pattern, set[str] | None, str | None]]:
    """(path regex, methods, group) of every route, included routers flattened, in routing order."""
    table = []
    for ctx in iter_route_contexts(routes):
        regex = getattr(ctx, "path_regex", None)
        if regex is not None:
            table.append((regex, ctx.methods, group_of(ctx.path_format or "")))
    return table


class RestrictedApi:
    """ASGI middleware: 403 for a request to a restricted group without its header."""

    def __init__(self, app: ASGIApp, groups: list[RestrictedGroup]):
        self.app = app
        self.by_api = {api: g for g in groups for api in g.apis}
        self.table: list[tuple[re.Pattern, set[str] | None, str | None]] | None = None

    def group(self, scope: Scope) -> str | None:
        """The group of the route that will answer: the first whose path and method match, else the
        first whose path matches (a 405), else None."""
        if self.table is None:
            self.table = route_table(scope["app"].routes)
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        partial = None
        for regex, methods, group in self.table:
            if regex.match(path):
                if methods is None or scope["method"] in methods:
                    return group
                partial = partial or group
        return partial

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            api = self.group(scope)
            restriction = self.by_api.get(api) if api else None
            if restriction is not None and not self.allowed(scope, restriction):
                denied = Forbidden(api, restriction.key)
                return await error_response(denied.status, str(denied))(scope, receive, send)
        await self.app(scope, receive, send)

    @staticmethod
    def allowed(scope: Scope, restriction: RestrictedGroup) -> bool:
        key = restriction.key.encode("latin-1")
        return carries_key([v for k, v in scope["headers"] if k.lower() == key], restriction)
