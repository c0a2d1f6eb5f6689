"""Transport security of the connection `taskq doctor` makes: TLS and authentication, judged
by where the server is (loopback needs neither)."""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from taskq.doctor.report import Check, ok, warn
from taskq.settings import Settings

TLS_FIX = "add a tls block to the server and pass --tls-ca (docs/operations.md#tls)"
AUTH_FIX = "require users on the server (deploy/nats/accounts.conf) and pass their credentials"


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def hosts(url: str) -> list[str]:
    """The host of every server URL in `url` (comma-separated)."""
    found = []
    for part in url.split(","):
        part = part.strip()
        host = urlsplit(part if "://" in part else f"nats://{part}").hostname
        found.append(host or part)
    return found


def judge_transport(settings: Settings, info: dict[str, Any]) -> Check:
    """ok on loopback; else warn unless the connection is both encrypted and authenticated."""
    remote = [h for h in hosts(settings.url) if not is_loopback(h)]
    encrypted = bool(
        info.get("tls_required")
        or settings.tls_ca
        or settings.tls_cert
        or settings.url.strip().startswith("tls://")
    )
    authenticated = bool(info.get("auth_required"))
    how = ("TLS" if encrypted else "plain text") + (
        ", authenticated" if authenticated else ", no authentication"
    )
    if not remote:
        return ok("tls", f"{how}, loopback only")
    where = ", ".join(remote)
    if not encrypted and not authenticated:
        return warn(
            "tls",
            f"{how} to {where}: anyone who reaches it can read, enqueue and delete tasks",
            f"{AUTH_FIX}; {TLS_FIX}",
        )
    if not encrypted:
        return warn(
            "tls", f"{how} to {where}: tasks and results cross the network in clear", TLS_FIX
        )
    if not authenticated:
        return warn("tls", f"{how} to {where}: the server admits anyone who reaches it", AUTH_FIX)
    return ok("tls", f"{how} to {where}")
