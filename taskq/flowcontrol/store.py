"""The streams flow control keeps its state in, made once per connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from taskq.client import Client
from taskq.retrying import retry_transient
from taskq.topology.specs import limits_stream


async def ensure_limits(client: Client) -> str:
    """The `<PREFIX>_LIMITS` stream (TTL records), created if missing; its name."""
    spec = limits_stream(client.names, client.settings)
    await _ensure_once(client, spec.name, lambda: client.connection.streams.ensure(spec))
    return spec.name


async def _ensure_once(client: Client, name: str, make: Callable[[], Awaitable[None]]) -> None:
    if name in client.ensured:  # once per connection: flow checks run per task
        return
    subjects = await client.connection.streams.subjects(name)
    if subjects is None:
        await retry_transient(make, what=f"{name} set-up")
    client.ensured.add(name)
