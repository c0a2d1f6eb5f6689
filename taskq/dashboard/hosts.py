"""Which `Host` and `Origin` a dashboard answers to.

A browser sends a page's requests to whatever address its DNS name resolves to: a page of
attacker.example, once that name resolves to 127.0.0.1 ("DNS rebinding"), reaches a
loopback dashboard as a same-origin page, able to read it and to post its forms. Its
requests still say `Host: attacker.example:PORT`, so the dashboard answers only to its own
addresses: those it listens on (every loopback name for a loopback bind; the address a
request arrived at for a bind to all addresses: an IP literal of this machine, never a
name), and the names the operator allows (`--allowed-host`: a reverse proxy's or a real DNS
name). A name alone admits it on any port (the proxy's port is not the dashboard's), and
`NAME:PORT` only on that port. See docs/dashboard.md, "Security".
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from taskq.errors import ConfigError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
DEFAULT_PORTS = {"http": 80, "https": 443}
_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")


@dataclass(frozen=True)
class Authority:
    """A host as a `Host` header or an origin names it: a lower-case name or IP literal
    (IPv6 in brackets, in its shortest form) and a port (None: any, in the allow-list only)."""

    name: str
    port: int | None

    def __str__(self) -> str:
        return self.name if self.port is None else f"{self.name}:{self.port}"


def parse_authority(text: str, default_port: int | None) -> Authority | None:
    """`name[:port]` as in a `Host` header (no port: `default_port`); None when it is not
    one (a path, user info, an unbracketed IPv6 address, a port out of range)."""
    text = text.strip().lower()
    if text.startswith("["):
        literal, bracket, rest = text[1:].partition("]")
        name = _ipv6(literal) if bracket else None
    else:
        name, colon, port_text = text.partition(":")
        rest = colon + port_text
        name = _ip_or_name(name)
    if name is None:
        return None
    if not rest:
        return Authority(name, default_port)
    digits = rest[1:]
    if rest[0] != ":" or not (digits.isascii() and digits.isdigit()) or len(digits) > 5:
        return None
    port = int(digits)
    return Authority(name, port) if 0 < port < 65536 else None


def _ipv6(literal: str) -> str | None:
    try:
        return f"[{ipaddress.IPv6Address(literal).compressed}]"
    except ValueError:
        return None


def _ip_or_name(name: str) -> str | None:
    try:
        return str(ipaddress.IPv4Address(name))
    except ValueError:
        return name if _NAME.fullmatch(name) else None


def parse_allowed(entries: Iterable[str]) -> tuple[Authority, ...]:
    """The allow-list (`NAME` or `NAME:PORT` each); ConfigError naming a bad entry."""
    parsed = []
    for entry in entries:
        authority = parse_authority(entry, None)
        if authority is None:
            raise ConfigError(
                f"--allowed-host {entry!r} is not a host name or IP address with an optional :PORT"
            )
        parsed.append(authority)
    return tuple(parsed)


def _literal(address: str) -> str:
    """An address as a `Host` header writes it (IPv4 in IPv6 as IPv4, IPv6 bracketed)."""
    try:
        ip = ipaddress.ip_address(address.strip("[]").split("%")[0])
    except ValueError:
        return address.lower()  # a bind to a host name
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return f"[{ip.compressed}]" if ip.version == 6 else str(ip)


def _is_loopback(literal: str) -> bool:
    if literal == "localhost":
        return True
    try:
        return ipaddress.ip_address(literal.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostRule:
    """The hosts one dashboard answers to: from the address it was told to listen on
    (`bind`, the `--host`) and the allow-list."""

    bind: str
    allowed: tuple[Authority, ...] = ()

    def own(self, local: tuple[str, int] | None) -> tuple[Authority, ...]:
        """The dashboard's own addresses, for a request that arrived at `local` (this end's
        address and port of its connection; None: unknown, then none)."""
        if local is None:
            return ()
        address, port = local
        bind = _literal(self.bind)
        if bind in ("0.0.0.0", "[::]", ""):  # every address: the one this request came to
            here = _literal(address)
            names = (here, *LOOPBACK_NAMES) if _is_loopback(here) else (here,)
        elif _is_loopback(bind):
            names = (*LOOPBACK_NAMES, bind)
        else:
            names = (bind,)
        return tuple(Authority(name, port) for name in dict.fromkeys(names))

    def admits(self, host: Authority, local: tuple[str, int] | None) -> bool:
        """Whether `host` names this dashboard: one of its own, or allowed."""
        if host in self.own(local):
            return True
        return any(a.name == host.name and a.port in (None, host.port) for a in self.allowed)

    def host_refusal(self, host: str | None, local: tuple[str, int] | None) -> str:
        """Why a request with this `Host` header is refused ("" when it is not)."""
        if not host:
            return "refused: the request has no Host header"
        parsed = parse_authority(host, DEFAULT_PORTS["http"])
        if parsed is not None and self.admits(parsed, local):
            return ""
        own = ", ".join(str(a) for a in self.own(local))
        return (
            f"refused: Host {host} is not this dashboard's address ({own}); "
            "add it with --allowed-host if it is yours"
        )

    def origin_refusal(self, origin: str | None, scheme: str, local: tuple[str, int] | None) -> str:
        """Why an action with this `Origin` is refused ("" when it is not): it must be the
        dashboard's own origin (`scheme` and one of its own addresses) or, over http or
        https (a TLS proxy), an allowed host."""
        if origin is None or origin == "null":
            had = "none" if origin is None else "null"
            return (
                "refused: an action must carry the Origin of the dashboard's own page; "
                f"it had {had}"
            )
        given, sep, rest = origin.partition("://")
        host = parse_authority(rest, DEFAULT_PORTS.get(given)) if sep else None
        if host is not None and given == scheme and host in self.own(local):
            return ""
        if host is not None and given in DEFAULT_PORTS and self.admits(host, None):
            return ""
        return f"refused: a request from another site ({origin})"
