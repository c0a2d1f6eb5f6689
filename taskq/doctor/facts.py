"""What `taskq doctor` learns before judging: every configured server's INFO, the account's
JetStream usage, the prefix's streams, a server-side time stamp, and the monitoring
endpoints. Read-only: nothing here writes to the server."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from taskq.client import Client
from taskq.doctor.monitor import Monitored, read_all
from taskq.errors import TaskqError
from taskq.nats import Connection
from taskq.nats.probes import Probe
from taskq.records.codec import connect
from taskq.settings import Settings


@dataclass(frozen=True)
class ServerSeen:
    """One configured URL: the INFO its server sent, or why it could not be reached."""

    url: str
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def name(self) -> str:
        """The server's name, or its URL when it has none (a name is its id by default)."""
        name = str(self.info.get("server_name") or "")
        return name if name and name != self.info.get("server_id") else self.url


@dataclass(frozen=True)
class StreamSeen:
    name: str
    replicas: int
    sources: tuple[dict[str, Any], ...] = ()  # its sources' state, as STREAM.INFO says


@dataclass(frozen=True)
class Facts:
    """Everything the checks judge (`clock`: a stream-info reply carrying the server's `ts`)."""

    settings: Settings
    info: dict[str, Any]
    servers: list[ServerSeen]
    account: dict[str, Any] | None
    streams: list[StreamSeen] | None
    streams_error: str | None
    clock: Probe | None
    monitors: list[Monitored]


async def gather(client: Client, monitor_urls: list[str]) -> Facts:
    """Read every fact from the server `client` is connected to (and the other URLs)."""
    probes = client.connection.probes
    monitors = asyncio.create_task(read_all(monitor_urls))
    servers = await _servers(client.connection, client.settings)
    account = (await probes.api("INFO")).reply
    streams, error, clock = await _streams(client)
    return Facts(
        client.settings,
        probes.server_info(),
        servers,
        account if account and "error" not in account else None,
        streams,
        error,
        clock,
        await monitors,
    )


async def _servers(connection: Connection, settings: Settings) -> list[ServerSeen]:
    urls = [u.strip() for u in settings.url.split(",") if u.strip()]
    if len(urls) == 1:
        return [ServerSeen(urls[0], connection.probes.server_info())]
    return list(await asyncio.gather(*(_server(settings, url) for url in urls)))


async def _server(settings: Settings, url: str) -> ServerSeen:
    """Connect to `url` alone, to learn that server's INFO (or why it is unreachable)."""
    try:
        connection, _ = await connect(settings.model_copy(update={"url": url}))
    except TaskqError as exc:
        return ServerSeen(url, error=str(exc))
    try:
        return ServerSeen(url, connection.probes.server_info())
    finally:
        await connection.close()


async def _streams(client: Client) -> tuple[list[StreamSeen] | None, str | None, Probe | None]:
    """The prefix's streams with their replicas, or why they could not be listed; and the
    first stream-info reply (it carries the server's time stamp)."""
    names = await _stream_names(client)
    if isinstance(names, str):
        return None, names, None
    found: list[StreamSeen] = []
    clock: Probe | None = None
    for name in names:
        probe = await client.connection.probes.api(f"STREAM.INFO.{name}")
        config = (probe.reply or {}).get("config")
        if not probe.allowed or not isinstance(config, dict):
            continue
        sources = tuple(s for s in (probe.reply or {}).get("sources") or [] if isinstance(s, dict))
        found.append(StreamSeen(name, int(config.get("num_replicas") or 1), sources))
        if clock is None and (probe.reply or {}).get("ts"):
            clock = probe
    return found, None, clock


async def _stream_names(client: Client) -> list[str] | str:
    """The names of the prefix's streams (queues, DLQ, buckets), or why they are unknown."""
    up = client.settings.prefix.upper()
    mine = (f"{up}_", f"KV_{up}_", f"OBJ_{up}_")
    names: list[str] = []
    while True:
        probe = await client.connection.probes.api("STREAM.NAMES", {"offset": len(names)})
        reply = probe.reply or {}
        if not probe.allowed:
            return "this identity may not list streams ($JS.API.STREAM.NAMES)"
        if "error" in reply or probe.reply is None:
            return f"listing streams failed: {reply.get('error') or 'no answer'}"
        page = [str(n) for n in reply.get("streams") or []]
        names += page
        if not page or len(names) >= int(reply.get("total", 0)):
            return sorted(n for n in names if n.startswith(mine))
