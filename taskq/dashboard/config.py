"""What a dashboard is started with, the rule about where it may listen, and its errors."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from taskq.dashboard.hosts import parse_allowed
from taskq.errors import ConfigError, TaskqError
from taskq.settings import Settings

TOKEN_ENV = "TASKQ_DASHBOARD_TOKEN"
ALLOWED_HOSTS_ENV = "TASKQ_DASHBOARD_ALLOWED_HOSTS"


@dataclass(frozen=True)
class DashboardConfig:
    """A dashboard's options: the NATS settings it reads with (the CLI's), where it
    listens, whether it refuses every action (`read_only`), the token a browser or a
    script must present (None: none asked, allowed on loopback only), and the other hosts
    it answers to (`allowed_hosts`: `NAME` on any port or `NAME:PORT`, as browsers reach it
    through a reverse proxy or a DNS name; ConfigError when one is not a host)."""

    settings: Settings
    host: str = "127.0.0.1"
    port: int = 8787
    read_only: bool = False
    token: str | None = None
    allowed_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        parse_allowed(self.allowed_hosts)

    def server_label(self) -> str:
        """The NATS URL(s) without any credentials in them, and the prefix: what the page
        may show about its connection."""
        urls = ",".join(_without_userinfo(u) for u in self.settings.url.split(","))
        return f"{urls} (prefix {self.settings.prefix})"


class UnsafeBind(ConfigError):
    """The dashboard was asked to listen beyond loopback without a token."""

    def __init__(self, host: str) -> None:
        self.host = host
        super().__init__(
            f"refusing to listen on {host} without a token: anyone who reaches it could act "
            f"on your queues; pass --token (or set {TOKEN_ENV}), or keep --host 127.0.0.1"
        )


class DashboardError(TaskqError):
    """A request the dashboard answers with an error page (or JSON): `status` is the
    HTTP status; `see` a link the page offers instead (URL, text)."""

    def __init__(self, status: int, message: str, see: tuple[str, str] | None = None) -> None:
        self.status = status
        self.message = message
        self.see = see
        super().__init__(message)


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (only this machine can connect)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check_bind(host: str, token: str | None) -> None:
    """UnsafeBind unless `host` is loopback or a token protects the dashboard."""
    if not token and not is_loopback(host):
        raise UnsafeBind(host)


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.username is None and parts.password is None:
        return url.strip()
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
