"""Ensuring the dead-letter stream exists (for tools that run without a worker)."""

from __future__ import annotations

from taskq.app import App
from taskq.retrying import retry_transient
from taskq.topology import dlq_stream


async def ensure_dlq(app: App) -> None:
    broker = await app.broker()
    spec = dlq_stream(app.names, app.settings)
    await retry_transient(lambda: broker.ensure_stream(spec), what="DLQ set-up")
