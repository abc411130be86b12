"""The proxies in front, by address (INR_FORWARDED_ALLOW_IPS): whose forwarded and trusted user headers hold
(service/server/forwarded.py applies them)."""

from __future__ import annotations

import ipaddress
from typing import Iterable


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
