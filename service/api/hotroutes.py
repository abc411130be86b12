"""Hot routes: inference endpoints that the server may call directly, without FastAPI's routing and parameter
solving (service/server/hotpath.py).

A protocol module declares one with `hot(endpoint, call)`: `call(request, path_params)` answers exactly as
FastAPI's call of `endpoint` would, for a request whose path matched the endpoint's route; `bare`: only when
the request has no query string (the endpoint has query parameters that `call` does not read). The server
finds the declarations on the app's routes with `hot_call`, which service/app.py hands it, so that it never
imports a protocol module.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

HotCall = Callable[[Request, dict], Awaitable[Response]]
ATTRIBUTE = "__inr_hot__"


def hot(endpoint: Callable, call: HotCall, *, bare: bool = False) -> None:
    setattr(endpoint, ATTRIBUTE, (call, bare))


def hot_call(endpoint) -> tuple[HotCall, bool] | None:
    """The (call, bare) an endpoint was declared with, or None."""
    return getattr(endpoint, ATTRIBUTE, None)
