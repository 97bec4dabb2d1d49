"""Which Host headers the dashboard answers: its defence against DNS rebinding.

A web page elsewhere can point a name of its own at this machine (DNS rebinding) and then read
the dashboard as its own origin; the browser then sends that name as the Host. So every request
must name the dashboard as the user reaches it, whatever address it is bound to: the bound
address itself; the loopback names when bound to loopback or to every address; this machine's
own names and addresses when bound to every address; and the names the user serves it under
(`runner dashboard --allow-host NAME`). The port is not compared: a rebinding page names its
own host, and a proxy in front may change the port.

Not here: the middleware that refuses the rest (server.py).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ANY_ADDRESS = frozenset({"", "0.0.0.0", "::"})
# A DNS name or an IPv4 address: letters, digits, hyphens, underscores, dots (IPv6 aside).
_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
_PORT = re.compile(r"[0-9]{1,5}")


def canonical(name: str) -> str | None:
    """A host name as compared: lowercase, no brackets, no trailing dot, an IP address in its
    canonical form (`::0001` is `::1`); None if it is neither a name nor an address."""
    name = name.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    name = name.removesuffix(".")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name if _NAME.fullmatch(name) else None


def host_of(header: str) -> str | None:
    """The host of a Host header ("name", "name:port", "[v6]:port"), canonical; None if the
    header is not one (garbage from a hostile client)."""
    header = header.strip()
    if header.startswith("["):  # an IPv6 literal, its port after the bracket
        address, bracket, rest = header[1:].partition("]")
        if not bracket or not _is_ipv6(address) or (rest and not rest.startswith(":")):
            return None
        name, port = address, rest[1:] if rest else None
    else:  # a name or IPv4: an unbracketed IPv6 fails here, as its port
        name, colon, port_text = header.partition(":")
        port = port_text if colon else None
    if port is not None and not _PORT.fullmatch(port):
        return None
    return canonical(name)


@dataclass(frozen=True)
class HostPolicy:
    """The hosts a dashboard bound to `bound` answers to."""

    bound: str
    names: frozenset[str]
    any_address: bool  # bound to every address: this machine's addresses, whenever they change

    def allows(self, header: str | None) -> bool:
        host = host_of(header) if header is not None else None
        if host is None:
            return False
        return host in self.names or (self.any_address and host in local_addresses())

    def refusal(self, header: str | None) -> str:
        """The one line that says why a request was refused and how to allow a name."""
        shown = "every address" if self.any_address else self.bound
        asked = repr(header[:100]) if header is not None else "no host"  # a hostile header
        return (
            f"this dashboard (bound to {shown}) does not answer requests addressed to "
            f"{asked}; to serve it under that name, start it with --allow-host NAME"
        )


def policy(bound: str, allowed: tuple[str, ...] = ()) -> HostPolicy:
    """The policy of a dashboard bound to `bound` (an address or a name) that also answers
    the names in `allowed` (already checked with `canonical`)."""
    host = canonical(bound) or bound
    any_address = host in ANY_ADDRESS
    names = {host, *(canonical(name) or name for name in allowed)}
    if any_address or host in LOOPBACK_NAMES or _is_loopback(host):
        names |= LOOPBACK_NAMES
    if any_address:
        names |= machine_names()
    return HostPolicy(host, frozenset(names), any_address)


def machine_names() -> set[str]:
    """This machine's host name and fully qualified name (as the resolver gives it)."""
    names = {socket.gethostname(), socket.getfqdn()}
    return {c for c in (canonical(n) for n in names) if c}


def local_addresses() -> set[str]:
    """Every address of this machine's interfaces now (read per request: DHCP, a VPN)."""
    import psutil

    return {
        host
        for addresses in psutil.net_if_addrs().values()
        for a in addresses
        if a.family in (socket.AF_INET, socket.AF_INET6)
        and (host := canonical(a.address.partition("%")[0]))
    }


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_ipv6(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 6
    except ValueError:
        return False
