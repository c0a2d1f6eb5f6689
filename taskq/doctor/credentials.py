"""The shipped passwords, tried: the roles' passwords of deploy/nats/accounts.conf
(`producer-secret`, `worker-secret`, `operator-secret`) and the cluster's route password
(`route-secret`, deploy/nats/cluster/*.conf and deploy/k8s/nats.yaml) are in the repository
for anyone to read, so a server that still takes one admits whoever reaches it.

Nothing changes on the server. A role's password is tried by connecting with it and closing
at once; a made-up user is tried beside them, because a server that admits that one too does
not judge passwords here (a client certificate decides, say), and nothing can be concluded.
The route password is tried on each monitored node's route port (`/varz` `cluster`) with the
route protocol's CONNECT, then PING: PONG says it was taken, `Authorization Violation` that
it was refused. The CONNECT names the cluster the port itself announced (another name could
make a server whose name is dynamic take it), and the connection closes before it could
become a route: a server makes one only from the INFO that follows a CONNECT, never sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from taskq.doctor.monitor import Monitored
from taskq.doctor.report import Check, ok, warn
from taskq.errors import TaskqError
from taskq.records.codec import connect
from taskq.settings import Settings

# what deploy/ ships (tests/test_doctor_credentials.py checks these against its files)
ROLE_PASSWORDS = {
    "producer": "producer-secret",
    "worker": "worker-secret",
    "operator": "operator-secret",
    "leaf-s1": "leaf-s1-secret",  # an edge hub's example site user (deploy/nats/hub.conf)
}
ROUTE_USER, ROUTE_PASSWORD = "taskq-route", "route-secret"
SHIPPED = frozenset({*ROLE_PASSWORDS.values(), ROUTE_PASSWORD})
TIMEOUT = 2.0  # seconds for one try: a server answers a CONNECT at once
EVERY_ADDRESS = ("", "0.0.0.0", "::", "[::]")
ROLES_FIX = (
    "replace the shipped passwords in accounts.conf and in every TASKQ_PASSWORD (compose, "
    "k8s secrets), or use nkeys / JWT creds (docs/security.md)"
)
ROUTE_FIX = "replace route-secret in every node's cluster authorization and route URLs"


@dataclass(frozen=True)
class RouteTry:
    """The route password tried on one node: `admitted` None when nothing could be learned
    (`note` says why)."""

    node: str
    admitted: bool | None
    note: str = ""


@dataclass(frozen=True)
class Tried:
    """What the shipped passwords did. `url`: where the roles' were tried; `asks`: the
    server asks clients for credentials; `own`: the shipped password doctor itself connected
    with; `anyone`: a made-up user got in too; `roles`: the roles whose shipped password got
    in; `routes`: one try per monitored node with a route port; `clustered`: the server's
    INFO names a cluster."""

    url: str
    asks: bool
    own: str | None
    anyone: bool
    roles: tuple[str, ...]
    routes: tuple[RouteTry, ...]
    clustered: bool


async def try_shipped(
    settings: Settings, info: dict[str, Any], url: str | None, monitors: Sequence[Monitored]
) -> Tried:
    """Every shipped password, tried on the server doctor connected to (at `url`, which
    sent `info`) and on the route port of each node `monitors` read."""
    where = bare(url or settings.url.split(",")[0])
    asks = bool(info.get("auth_required"))
    anyone, roles = await _try_roles(settings, where) if asks else (False, ())
    ports = [(m, port) for m in monitors if (port := route_port(m)) is not None]
    routes = await asyncio.gather(*(_try_route(m, port) for m, port in ports))
    own = own_shipped(settings) if asks else None
    return Tried(where, asks, own, anyone, roles, tuple(routes), bool(info.get("cluster")))


def _split(url: str) -> SplitResult:
    """A server URL's parts (`nats://` when it has no scheme)."""
    url = url.strip()
    return urlsplit(url if "://" in url else f"nats://{url}")


def bare(url: str) -> str:
    """`url` without the user and password it may carry."""
    parts = _split(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def own_shipped(settings: Settings) -> str | None:
    """The shipped password doctor itself connects with (its settings' or a URL's)."""
    given = [settings.password, *(_split(u).password for u in settings.url.split(","))]
    return next((p for p in given if p in SHIPPED), None)


async def _try_roles(settings: Settings, url: str) -> tuple[bool, tuple[str, ...]]:
    """Whether a made-up user gets in, and the roles whose shipped password does (each a
    connection of its own, all at once)."""
    nobody = (f"taskq-doctor-{secrets.token_hex(4)}", secrets.token_urlsafe(16))
    tries = [nobody, *ROLE_PASSWORDS.items()]
    admitted = await asyncio.gather(*(_admits(settings, url, u, p) for u, p in tries))
    roles = tuple(r for r, yes in zip(ROLE_PASSWORDS, admitted[1:], strict=True) if yes)
    return admitted[0], roles


async def _admits(settings: Settings, url: str, user: str, password: str) -> bool:
    """Whether the server at `url` lets `user` in with `password` (the connection, if made,
    closed at once). Only the credentials change: the TLS options stay doctor's own."""
    trial = settings.model_copy(
        update={
            "url": url,
            "user": user,
            "password": password,
            "token": None,
            "nkey_seed": None,
            "creds": None,
            "connect_timeout": min(settings.connect_timeout, TIMEOUT),
        }
    )
    try:
        connection, _ = await connect(trial, name="taskq-doctor")
    except TaskqError:  # refused (PermissionDenied), or no answer: not let in
        return False
    await connection.close()
    return True


def route_port(monitored: Monitored) -> tuple[str, int] | None:
    """Where a monitored node listens for routes (`/varz` `cluster`; the monitoring URL's
    host when it listens on every address), or None when it is in no cluster."""
    cluster = monitored.varz.cluster if monitored.varz else None
    if cluster is None or not cluster.cluster_port:
        return None
    host = cluster.addr if cluster.addr not in EVERY_ADDRESS else urlsplit(monitored.url).hostname
    return host or "127.0.0.1", cluster.cluster_port


async def _try_route(monitored: Monitored, where: tuple[str, int]) -> RouteTry:
    """The route password tried on one node's route port, within TIMEOUT."""
    try:
        async with asyncio.timeout(TIMEOUT):
            admitted, note = await _route_handshake(*where)
    except (OSError, ValueError) as exc:  # TimeoutError is an OSError
        admitted, note = None, f"no answer on {where[0]}:{where[1]} ({type(exc).__name__})"
    return RouteTry(monitored.name, admitted, note)


async def _route_handshake(host: str, port: int) -> tuple[bool | None, str]:
    """Read the route port's INFO, send the shipped route credentials, read the verdict."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        info = _info(await reader.readline())
        cluster = str(info.get("cluster") or "")
        if info.get("tls_required"):
            return None, "its route port wants TLS"
        if not info.get("auth_required"):
            return None, "its route port asks no credentials"
        if not cluster:
            return None, "its route port names no cluster"
        writer.write(_route_connect(cluster))
        await writer.drain()
        return await _verdict(reader)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _info(line: bytes) -> dict[str, Any]:
    """The JSON of a server's `INFO {...}` line."""
    op, _, body = line.decode().partition(" ")
    if op != "INFO":
        raise ValueError(f"not an INFO line: {line[:40]!r}")
    found = json.loads(body)
    return found if isinstance(found, dict) else {}


def _route_connect(cluster: str) -> bytes:
    """A route's CONNECT (no `lang`: that marks a client) with the shipped credentials and
    the cluster's own name, then a PING."""
    connect = {
        "echo": False,
        "verbose": False,
        "pedantic": False,
        "tls_required": False,
        "user": ROUTE_USER,
        "pass": ROUTE_PASSWORD,
        "name": "taskq-doctor",
        "cluster": cluster,
    }
    return b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n"


async def _verdict(reader: asyncio.StreamReader) -> tuple[bool | None, str]:
    """True on PONG (the credentials were taken), False on an authorization error."""
    while line := (await reader.readline()).strip():
        if line == b"PONG":
            return True, ""
        if line.startswith(b"-ERR"):
            text = line.decode(errors="replace")
            return (False, "") if "authorization" in text.lower() else (None, text)
    return None, "closed without an answer"


def judge_shipped(tried: Tried) -> Check:
    """The credentials check: a warning naming every shipped password the server takes."""
    found = _findings(tried)
    if not found:
        return ok("credentials", _clean(tried))
    fixes = [ROLES_FIX] if tried.roles or tried.own else []
    fixes += [ROUTE_FIX] if any(r.admitted for r in tried.routes) else []
    return warn("credentials", "; ".join(found), "; ".join(fixes))


def _findings(tried: Tried) -> list[str]:
    found = []
    if tried.roles and not tried.anyone:
        each = ", ".join(f"{r} ({ROLE_PASSWORDS[r]})" for r in tried.roles)
        found.append(
            f"the shipped password works for {each} on {tried.url}: whoever has read "
            "deploy/nats/accounts.conf (or hub.conf) connects as that role"
        )
    if tried.own and not tried.anyone:
        found.append(f"doctor itself connected with the shipped password {tried.own}")
    opened = [r.node for r in tried.routes if r.admitted]
    if opened:
        found.append(
            f"the shipped route password ({ROUTE_USER}/{ROUTE_PASSWORD}) opens the route port "
            f"of {', '.join(opened)}: a server presenting it joins the cluster and receives "
            "every message"
        )
    return found


def _clean(tried: Tried) -> str:
    """What was tried when no shipped password works."""
    if not tried.asks:
        said = "the server asks clients for no credentials: no password to try"
    elif tried.anyone:
        said = f"not judged: a made-up user gets in too on {tried.url} (no password decides)"
    else:
        said = f"no shipped role password works on {tried.url}"
    routes = _routes_said(tried)
    return f"{said}; {routes}" if routes else said


def _routes_said(tried: Tried) -> str:
    if not tried.routes:
        clustered = "route password not tried: the route port is read from /varz (--monitor)"
        return clustered if tried.clustered else ""
    refused = [r.node for r in tried.routes if r.admitted is False]
    said = [f"route password refused by {', '.join(refused)}"] if refused else []
    said += [f"route password not tried on {r.node}: {r.note}" for r in tried.routes if r.note]
    return "; ".join(said)
