"""Ensuring the dead-letter stream exists (for tools that run without a worker)."""

from __future__ import annotations

from taskq.client import ClientSource
from taskq.retrying import retry_transient
from taskq.topology.specs import dlq_stream


async def ensure_dlq(source: ClientSource) -> None:
    """Create the DLQ stream if missing (or update its drifted config), riding out elections."""
    client = await source.client()
    spec = dlq_stream(client.names, client.settings)
    await retry_transient(lambda: client.connection.streams.ensure(spec), what="DLQ set-up")
