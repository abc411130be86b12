"""Headers a proxy sets, believed only from the proxies the operator names (INR_FORWARDED_ALLOW_IPS, as uvicorn's
`--forwarded-allow-ips`): the forwarded client address, scheme, host, port and prefix (`X-Forwarded-*`), and the
trusted proxy's user and scopes headers (INR_ACCESS_TRUSTED_HEADER, INR_ACCESS_TRUSTED_SCOPES_HEADER).

From a peer in the list, the request's client becomes the last address of `X-Forwarded-For` that is not itself a
trusted proxy and its scheme `X-Forwarded-Proto`'s (so the login cookie is `Secure` behind a TLS proxy, and the
per-caller limits count the real client). From any other peer these headers are removed before anything reads
them: a client that sends `X-Remote-User: alice` or `X-Forwarded-Proto: https` itself is only itself.

This is the outermost middleware; `python -m service` turns uvicorn's own proxy handling off, so that this is the
only one (plain `uvicorn --factory` needs `--no-proxy-headers` for the same).
"""

from __future__ import annotations

from typing import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth.proxies import Proxies

FORWARDED = (b"forwarded", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port")
FORWARDED += (b"x-forwarded-prefix", b"x-real-ip")
SCHEMES = {"http": "http", "https": "https", "ws": "ws", "wss": "wss"}
WEBSOCKET = {"http": "ws", "https": "wss"}


class ForwardedHeaders:
    """ASGI middleware: forwarded headers applied from trusted proxies, removed from everyone else."""

    def __init__(self, app: ASGIApp, proxies: Proxies, identity: Iterable[str] = ()):
        self.app, self.proxies = app, proxies
        self.strip = frozenset(FORWARDED) | frozenset(h.lower().encode("latin-1") for h in identity if h)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        peer = (scope.get("client") or (None, 0))[0]
        headers = scope.get("headers", ())
        if not self.proxies.trusts(peer):
            if any(k in self.strip for k, _ in headers):
                scope = {**scope, "headers": [(k, v) for k, v in headers if k not in self.strip]}
            return await self.app(scope, receive, send)
        scope = dict(scope)
        for key, value in headers:
            if key == b"x-forwarded-for":
                scope["client"] = (self.proxies.client(value.decode("latin-1"), peer), 0)
            elif key == b"x-forwarded-proto":
                proto = SCHEMES.get(value.decode("latin-1").split(",")[0].strip().lower())
                if proto is not None:
                    scope["scheme"] = WEBSOCKET.get(proto, proto) if scope["type"] == "websocket" else proto
        await self.app(scope, receive, send)
