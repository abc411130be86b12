"""Model access over HTTP (docs/access.md): every route whose path names a model (`{name}` in its template: v1,
V2, the repository, IIIF) is checked against that model's policy before the route runs or its body is read.

The routes are read from the app's routing table, so a new route that names a model is checked without being
listed here (tests/service/server/test_model_access.py asks every one of them). The caller (service/auth/caller.py)
is put in the request's state for the routes that list models, which show a caller only what it may read.
Credentials that were sent but are not valid are a 401 on every route, whichever model it names.
"""

from __future__ import annotations

import math
import re
from typing import Callable

from fastapi.routing import iter_route_contexts
from starlette.types import ASGIApp, Receive, Scope, Send

from modelrepo.access import Access

from ..auth.caller import COOKIE, Authority, NotAuthenticated, from_scope
from ..auth.policy import ANONYMOUS, StaleSession, decide
from ..errors import ServiceError, error_response

Route = tuple[re.Pattern, str]
REFUSE, RENDER, DESCRIBE = "refuse", "render", "describe"
# Routes that answer a refused caller themselves, with the decision in the request's state: the IIIF image
# information and manifest (401s whose bodies still name the auth services, so a client can start the flow), and
# the auth probe
# (whose answer is the decision). Everything else that names a model is refused here, except the renders of a
# model with a substitute, which check their scale against it (IIIF's only: v1 render is refused).
DESCRIBES = ("/iiif/3/{name}", "/iiif/3/{name}/info.json", "/iiif/3/{name}/manifest.json", "/iiif/auth/probe/{name}")


def kind_of(template: str) -> str:
    if template in DESCRIBES:
        return DESCRIBE
    if template.startswith("/iiif/3/{name}/{region}"):  # the IIIF image requests, which check the scale
        return RENDER
    return REFUSE


def model_routes(routes) -> list[Route]:
    """(path regex, kind) of every route whose template names a model, included routers flattened."""
    table = []
    for ctx in iter_route_contexts(routes):
        regex, template = getattr(ctx, "path_regex", None), ctx.path_format or ""
        if regex is not None and "{name}" in template:
            table.append((regex, kind_of(template)))
    return table


HEALTH = "/health/"


def clearing_cookie(send: Send, secure: bool) -> Send:
    """`send` with a Set-Cookie that deletes the session cookie on the response's start."""
    cookie = f"{COOKIE}=; Max-Age=0; Path=/; HttpOnly; SameSite=lax{'; Secure' if secure else ''}".encode()

    async def wrapped(message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), (b"set-cookie", cookie)]}
        await send(message)

    return wrapped


def challenge(status: int, message: str, error: str = "") -> Callable:
    headers = {"WWW-Authenticate": f'Bearer realm="inr-serve"{f", error={chr(34)}{error}{chr(34)}" if error else ""}'}
    return error_response(status, message, headers if status == 401 else None)


class ModelAccess:
    """ASGI middleware: the caller in `scope["state"]["caller"]`; 401/403 for a model it may not read."""

    def __init__(
        self,
        app: ASGIApp,
        authority: Authority,
        access_of: Callable[[str], Access | None],
        default: str,
        static: frozenset[str] = frozenset(),
    ):
        self.app, self.authority, self.access_of, self.default = app, authority, access_of, default
        self.static = static  # the viewer's own files: a page load is not the key's requests (no rps quota)
        self.table: list[Route] | None = None

    def model(self, scope: Scope) -> tuple[str | None, str]:
        """The model the request's route names (an IIIF identifier's `@VERSION` left out), from the first route
        whose path matches, and the route's kind."""
        if self.table is None:
            self.table = model_routes(scope["app"].routes)
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        for regex, kind in self.table:
            m = regex.match(path)
            if m is not None:
                return m.group("name").partition("@")[0], kind
        return None, REFUSE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"].startswith(HEALTH):  # probes never need credentials, and bad ones never fail them
            scope.setdefault("state", {})["caller"] = ANONYMOUS
            return await self.app(scope, receive, send)
        try:
            caller = from_scope(self.authority, scope)
        except NotAuthenticated as e:
            return await challenge(401, str(e), "invalid_token")(scope, receive, send)
        scope.setdefault("state", {})["caller"] = caller
        if isinstance(caller, StaleSession):  # answered as anonymous, and the browser told to forget the cookie
            send = clearing_cookie(send, scope.get("scheme") == "https")
        over = None if scope["path"] in self.static else self.authority.over_quota(caller)
        if over is not None:
            wait, message = over
            return await error_response(429, message, {"Retry-After": str(math.ceil(wait))})(scope, receive, send)
        name, kind = self.model(scope)
        try:
            access = self.access_of(name) if name is not None else None
        except ServiceError as e:  # the policy is in a repository that does not answer (S3): a 503, never a guess
            return await error_response(e.status, str(e), e.headers)(scope, receive, send)
        if access is not None:
            decision = decide(caller, name, access, self.default)
            if not decision.allowed:
                if kind == DESCRIBE or (kind == RENDER and decision.substitute):
                    scope["state"]["refused"] = decision  # the route answers, or checks its size against it
                else:
                    reason = (
                        f"{decision.reason} ({caller.why})" if isinstance(caller, StaleSession) else decision.reason
                    )
                    return await challenge(decision.status, reason)(scope, receive, send)
        await self.app(scope, receive, send)
