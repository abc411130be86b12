"""Drain on SIGTERM: running requests finish, new ones get 503, then uvicorn shuts down.

`DrainGuard` is the outermost ASGI middleware; it counts the HTTP requests in flight in its
`Drain`. In the lifespan, `Drain.install` puts `Drain.on_signal` in front of uvicorn's own SIGTERM/SIGINT handler
(uvicorn installs it before the lifespan starts, in every worker process). On the first signal:

* the process starts draining at once: every new request, readiness included, is answered 503
  `{"error": ...}` with `Connection: close` and `Retry-After`, so a load balancer stops sending;
  liveness stays 200, the process is alive and finishing its work;
* requests already running go on; when none is left, or `INR_GRACEFUL_SHUTDOWN_S` has passed,
  uvicorn's handler runs: it closes the listener and the idle connections, gives whatever still
  runs the rest of the grace period, runs the lifespan shutdown, and re-raises the signal (exit
  status -15 for SIGTERM, as plain uvicorn).

A second signal while draining skips the wait.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import error_response

log = logging.getLogger(__name__)
SIGNALS = (signal.SIGTERM, signal.SIGINT)
ALWAYS = ("/health/live", "/v2/health/live")


class Drain:
    """Requests in flight, and whether (since when) the process drains."""

    def __init__(self, grace: float):
        self.grace = grace
        self.inflight = 0
        self.since: float | None = None  # monotonic time draining began
        self.previous: dict[int, object] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None  # the wait, referenced so that it is not collected
        self.listeners: list = []  # called on the loop when draining begins (the gRPC health service)

    @property
    def draining(self) -> bool:
        return self.since is not None

    # -- signals ---------------------------------------------------------------------------------
    def install(self) -> None:
        """Wrap the current SIGTERM/SIGINT handlers (uvicorn's). Only possible on the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return
        self.loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            self.previous[sig] = signal.signal(sig, self.on_signal)

    def uninstall(self) -> None:
        for sig, handler in self.previous.items():
            if signal.getsignal(sig) == self.on_signal:
                signal.signal(sig, handler)
        self.previous.clear()

    def on_signal(self, sig: int, frame) -> None:
        if self.draining:  # a second signal: stop waiting
            return self._forward(sig, frame)
        self.since = time.monotonic()
        log.info(
            "%s: draining %d running request(s), at most %.0f s", signal.Signals(sig).name, self.inflight, self.grace
        )
        self.loop.call_soon_threadsafe(self._start_waiting, sig)

    def _start_waiting(self, sig: int) -> None:
        for listener in self.listeners:
            listener()
        self.task = self.loop.create_task(self._wait_then_forward(sig))

    async def _wait_then_forward(self, sig: int) -> None:
        while self.inflight and time.monotonic() - self.since < self.grace:
            await asyncio.sleep(0.05)
        if self.inflight:
            log.warning("grace period over with %d request(s) still running", self.inflight)
        self._forward(sig, None)

    def _forward(self, sig: int, frame) -> None:
        handler = self.previous.get(sig)
        if callable(handler):
            handler(sig, frame)
        else:  # not under uvicorn: the default action
            self.uninstall()
            signal.raise_signal(sig)


class DrainGuard:
    """Counts requests in flight; while draining, answers new ones 503 (liveness excepted)."""

    def __init__(self, app: ASGIApp, drain: Drain):
        self.app, self.drain = app, drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        drain = self.drain
        if drain.draining and scope["path"] not in ALWAYS:
            response = error_response(
                503,
                "the server is shutting down; send the request to another replica",
                headers={"connection": "close", "retry-after": "1"},
            )
            return await response(scope, receive, send)
        drain.inflight += 1
        started = False

        async def watched(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            # uvicorn cancels what still runs when the grace period is over: answer that plainly
            # instead of letting the cancellation surface as a 500 with a traceback
            if not drain.draining:
                raise
            log.warning(
                "%s %s cut: still running at the end of the %.0f s grace period (INR_GRACEFUL_SHUTDOWN_S)",
                scope["method"],
                scope["path"],
                drain.grace,
            )
            if not started:
                response = error_response(
                    503,
                    "the server shut down before this request finished "
                    f"(INR_GRACEFUL_SHUTDOWN_S={drain.grace:g}); retry on another replica",
                    headers={"connection": "close", "retry-after": "1"},
                )
                await response(scope, receive, send)
        finally:
            drain.inflight -= 1
