"""nats-server's monitoring endpoint (`http: 8222`): `/varz` and `/jsz`, read for what no
client connection shows — the sync setting, the server's JetStream storage limit, its clock,
the JetStream cluster's size, its route port. The JSON is a trust boundary: pydantic reads
what we use.

Also the worker's start-up notice: a warning when the server it uses is known not to fsync
before acknowledging (docs/operations.md#durability).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

from taskq.nats import Connection

log = logging.getLogger("taskq.worker")


class _JetStreamConfig(BaseModel):
    sync_always: bool = False
    sync_interval: int = 0  # nanoseconds
    max_storage: int = 0


class _JetStreamStats(BaseModel):
    storage: int = 0


class _JetStream(BaseModel):
    config: _JetStreamConfig | None = None
    stats: _JetStreamStats | None = None


class _Cluster(BaseModel):
    """Where the server listens for routes from its cluster's other servers."""

    name: str = ""
    addr: str = ""
    cluster_port: int = 0
    tls_required: bool = False


class Varz(BaseModel):
    """The part of `/varz` taskq reads."""

    server_id: str = ""
    server_name: str = ""
    version: str = ""
    now: datetime | None = None
    jetstream: _JetStream | None = None
    cluster: _Cluster | None = None


class _MetaCluster(BaseModel):
    cluster_size: int | None = None


class _Jsz(BaseModel):
    meta_cluster: _MetaCluster | None = None


@dataclass(frozen=True)
class Monitored:
    """What one monitoring endpoint said (`error` set when it could not be read).
    `sent`/`received` bracket the `/varz` request on this host's clock."""

    url: str
    varz: Varz | None = None
    cluster_size: int | None = None
    error: str | None = None
    sent: float = 0.0
    received: float = 0.0

    @property
    def name(self) -> str:
        """The server's name, or the endpoint's URL when it has none but its id."""
        varz = self.varz
        named = varz is not None and varz.server_name and varz.server_name != varz.server_id
        return varz.server_name if varz is not None and named else self.url


def split_urls(text: str | None) -> list[str]:
    """`TASKQ_MONITOR_URL`'s comma-separated endpoints as a list."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def base_url(text: str) -> str:
    """`127.0.0.1:8222` or `http://host:8222/` as `http://host:8222`."""
    text = text.strip().rstrip("/")
    return text if "://" in text else f"http://{text}"


def read(url: str, timeout: float = 2.0) -> Monitored:
    """`/varz` and `/jsz` of the endpoint at `url` (blocking: run it in a thread)."""
    url = base_url(url)
    if not url.startswith(("http://", "https://")):
        return Monitored(url, error="not an http(s) URL")
    sent = time.time()
    try:
        varz = Varz.model_validate(_get(f"{url}/varz", timeout))
        received = time.time()
        jsz = _Jsz.model_validate(_get(f"{url}/jsz", timeout))
    except (OSError, ValueError, ValidationError) as exc:
        return Monitored(url, error=_reason(exc))
    size = jsz.meta_cluster.cluster_size if jsz.meta_cluster else None
    return Monitored(url, varz, size, None, sent, received)


def _get(url: str, timeout: float) -> object:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.loads(answer.read())


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)  # urllib's URLError wraps the socket's error
    text = str(reason if reason is not None else exc)
    return text.splitlines()[0] if text else type(exc).__name__


async def read_all(urls: list[str]) -> list[Monitored]:
    """Every endpoint of `urls`, read at once (each in a thread)."""
    return list(await asyncio.gather(*(asyncio.to_thread(read, url) for url in urls)))


def sync_text(config: _JetStreamConfig) -> str:
    """`always`, or the interval as nats-server writes durations (`2m0s`)."""
    if config.sync_always:
        return "always"
    seconds = config.sync_interval / 1e9
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:g}s" if minutes else f"{rest:g}s"


async def durability_warning(connection: Connection, monitor_url: str | None) -> str | None:
    """Why the server `connection` uses may lose acknowledged tasks on an OS crash, when
    its monitoring endpoint says so; else None. Without `monitor_url` the endpoint is
    guessed at the server's host, port 8222, and believed only if it is that very server."""
    url = base_url(monitor_url) if monitor_url else _guess(connection)
    if url is None:
        return None
    seen = await asyncio.to_thread(read, url, 1.0)
    if seen.varz is None:
        if monitor_url:
            log.info("TASKQ_MONITOR_URL %s could not be read (%s)", url, seen.error)
        return None
    if not monitor_url and seen.varz.server_id != connection.probes.server_info().get("server_id"):
        return None  # another server answered on that port
    config = seen.varz.jetstream.config if seen.varz.jetstream else None
    if config is None or config.sync_always:
        return None
    return (
        f"NATS server {seen.name} acknowledges tasks before writing them to disk "
        f"(sync_interval {sync_text(config)}): an OS crash or power cut loses what came in "
        "since the last fsync; set jetstream { sync_interval: always } "
        "(docs/operations.md#durability)"
    )


def _guess(connection: Connection) -> str | None:
    url = connection.probes.connected_url()
    host = urlsplit(url).hostname if url else None
    if not host:
        return None
    return f"http://[{host}]:8222" if ":" in host else f"http://{host}:8222"


async def warn_if_not_durable(connection: Connection, monitor_urls: str | None) -> None:
    """Log durability_warning's findings for each endpoint of `monitor_urls` (or the
    guessed one): a worker's start-up notice, which never raises."""
    urls: list[str | None] = [*split_urls(monitor_urls)] or [None]
    for url in urls:
        try:
            warning = await durability_warning(connection, url)
        except Exception as exc:  # a notice must never stop a worker
            log.debug("durability check skipped: %s", exc)
            continue
        if warning:
            log.warning("%s", warning)
