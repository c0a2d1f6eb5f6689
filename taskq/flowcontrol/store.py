"""The streams flow control keeps its state in, made once per connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from taskq.client import Client
from taskq.nats import StoredMessage
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


async def write_once(
    client: Client,
    stream: str,
    subject: str,
    body: bytes,
    write: Callable[[], Awaitable[int | None]],
) -> int | None:
    """Run `write` (a create or compare-and-set of `body` on `subject`) with the transient
    retries; its sequence, or None when another write came first. `body` must be this
    call's own (an id or nonce only it holds): a write whose ack was lost (a loaded server)
    was stored, and its retry then loses to itself, so the record holding exactly `body`
    counts as this call's write."""
    tries = 0

    async def attempt() -> int | None:
        nonlocal tries
        tries += 1
        return await write()

    seq = await retry_transient(attempt)
    if seq is not None or tries == 1:
        return seq
    stored: StoredMessage | None = await client.connection.messages.last(stream, subject)
    return stored.seq if stored is not None and stored.data == body else None
