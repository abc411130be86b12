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

import ipaddress
from typing import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

FORWARDED = (b"forwarded", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port")
FORWARDED += (b"x-forwarded-prefix", b"x-real-ip")
SCHEMES = {"http": "http", "https": "https", "ws": "ws", "wss": "wss"}
WEBSOCKET = {"http": "ws", "https": "wss"}


def parse_networks(items: Iterable[str]) -> list:
    """`["127.0.0.1", "10.0.0.0/8", "::1"]` → networks; `*` trusts every peer; ValueError naming a bad item."""
    networks = []
    for item in items:
        item = item.strip()
        if item == "*":
            networks.append(ipaddress.ip_network("0.0.0.0/0"))
            networks.append(ipaddress.ip_network("::/0"))
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"'{item[:60]}' is not an IP address or network (e.g. 10.0.0.0/8)") from None
    return networks


class Proxies:
    """Which peers are proxies whose headers hold."""

    def __init__(self, items: Iterable[str]):
        self.networks = parse_networks(items)

    def trusts(self, host: str | None) -> bool:
        if not host or not self.networks:
            return False
        try:
            address = ipaddress.ip_address(host.split("%")[0])
        except ValueError:  # a unix socket's peer, a test client's name: no address, no trust
            return False
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in n for n in self.networks)

    def client(self, forwarded_for: str, peer: str) -> str:
        """The client behind the proxies: the last address in the chain that is not a trusted proxy."""
        hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return hop
        return hops[0] if hops else peer


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
