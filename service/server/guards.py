"""Slow clients (slowloris) are timed out, so that they cannot hold connections or requests forever.

uvicorn times out only idle keep-alive connections. Two gaps are closed here:

* `HeaderTimeoutProtocol` (uvicorn's httptools protocol, or h11 without httptools): a connection
  must deliver its request line and headers within `INR_HEADER_TIMEOUT_S` of its first byte (or
  of connecting); otherwise it gets 408 and is closed. It is passed to uvicorn as
  `http="service.server.guards:HeaderTimeoutProtocol"`, a name, so that worker processes import it too.
* `BodyLimit` (ASGI middleware): 413 for a body over INR_MAX_BODY_BYTES (POST /v1/fits: over
  INR_FIT_MAX_UPLOAD_BYTES plus the multipart envelope), at once from Content-Length, or while a
  chunked body streams in.
* `BodyTimeout` (ASGI middleware): while a request body is incomplete, each read may wait at most
  `INR_BODY_TIMEOUT_S`; a client that sends headers and then nothing gets 408 and the request's
  task ends, freeing whatever it held.
"""

from __future__ import annotations

import asyncio
import os

import h11
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import BodyTooLarge, error_response

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # pragma: no cover - uvicorn without httptools
    from uvicorn.protocols.http.h11_impl import H11Protocol as _Base


class BodyLimit:
    """413 for bodies over `limit` bytes: at once from Content-Length, or while a chunked body streams in.
    `larger` gives some paths their own limit and the setting that names it (the fit upload:
    INR_FIT_MAX_UPLOAD_BYTES plus the multipart envelope)."""

    def __init__(self, app: ASGIApp, limit: int, larger: dict[str, tuple[int, str]] | None = None):
        self.app, self.limit, self.larger = app, limit, larger or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        limit, setting = self.larger.get(path.rstrip("/") or "/", (self.limit, "INR_MAX_BODY_BYTES"))
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return await error_response(413, BodyTooLarge(limit, setting).detail)(scope, receive, send)
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit, setting)
            return message

        await self.app(scope, counted, send)


class BodyTimedOut(HTTPException):
    """Raised from `receive`; an HTTPException so FastAPI's body parsing re-raises it."""

    def __init__(self, seconds: float):
        super().__init__(
            408, f"the client sent no body data for {seconds:g} s (INR_BODY_TIMEOUT_S)", headers={"connection": "close"}
        )


class BodyTimeout:
    def __init__(self, app: ASGIApp, seconds: float):
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        complete = False

        async def timed() -> Message:
            nonlocal complete
            if complete:  # the body is in: later reads wait for a disconnect, which may take long
                return await receive()
            try:  # asyncio's timeout: about half the cost of anyio's cancel scope per read
                async with asyncio.timeout(self.seconds):
                    message = await receive()
            except TimeoutError:
                raise BodyTimedOut(self.seconds) from None
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await self.app(scope, timed, send)


def _timeout_response(seconds: float) -> bytes:
    body = b'{"error":"the request line and headers did not arrive within %g s (INR_HEADER_TIMEOUT_S)"}' % seconds
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )


class HeaderTimeoutProtocol(_Base):
    """uvicorn's HTTP protocol plus a deadline on the request line and headers."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.header_timeout = float(os.environ.get("INR_HEADER_TIMEOUT_S", "10"))
        self.header_timer: asyncio.TimerHandle | None = None
        self.in_request = False  # headers complete, response not yet

    def _arm(self) -> None:
        if self.header_timer is None and not self.in_request:
            self.header_timer = self.loop.call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _expired(self) -> None:
        self.header_timer = None
        if not self.in_request and not self.transport.is_closing():
            self.transport.write(_timeout_response(self.header_timeout))
            self.transport.close()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._arm()  # the first byte of a new request on a kept-alive connection
        super().data_received(data)
        if hasattr(self, "conn") and self.conn.their_state is not h11.IDLE:  # h11: no headers callback
            self._headers_done()

    def on_headers_complete(self) -> None:  # httptools
        self._headers_done()
        super().on_headers_complete()

    def _headers_done(self) -> None:
        self.in_request = True
        self._disarm()

    def on_response_complete(self) -> None:
        self.in_request = False
        super().on_response_complete()  # arms uvicorn's keep-alive timer; the next byte arms ours
