"""Reading a whole stream without consuming it (`Messages.read`, under `taskq dlq list`,
the dashboard's bulk actions and the operator's story) reads every message even when a
pull comes back empty on a busy machine, and stops at the end of what is stored."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import taskq.nats.messages as messages
from taskq import App
from taskq.client import Client
from taskq.errors import TransientError
from taskq.nats.pull import Delivery, Puller

COUNT = 2500  # three pulls of the reader's 1000


async def stored_stream(app: App) -> tuple[Client, str]:
    """A stream holding COUNT messages, numbered in their bodies: the app's DLQ stream,
    the one read this way in production."""
    from taskq.dlq.stream import ensure_dlq

    client = await app.client()
    await ensure_dlq(client)
    subject = client.names.dlq_subject("q", "t")
    acks = [await client.connection.publish_nowait(subject, b"%d" % n, {}) for n in range(COUNT)]
    await asyncio.gather(*acks)
    return client, client.names.dlq_stream


async def read_all(client: Client, stream: str) -> list[int]:
    return [int(stored.data) async for stored in client.connection.messages.read(stream)]


def empty_pulls(monkeypatch: pytest.MonkeyPatch, which: set[int], send: bool) -> list[int]:
    """Make the pulls numbered in `which` (1 is the first) bring nothing, as when their
    expiry passes first; with `send`, each still asks the server, whose deliveries then
    arrive after the pull gave up. Returns the numbers of the pulls made."""
    real = messages._pulled
    made: list[int] = []

    async def pulled(puller: Puller, batch: int) -> list[Delivery]:
        made.append(len(made) + 1)
        if made[-1] not in which:
            return await real(puller, batch)
        if send:  # the request the real pull would make; its answer lands in the queue
            request: Any = b'{"batch": %d, "expires": 2000000000}' % batch
            await puller._client.publish(puller._next, request, reply=puller._inbox)
        return []

    monkeypatch.setattr(messages, "_pulled", pulled)
    return made


async def test_empty_pulls_in_the_middle_lose_nothing(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, stream = await stored_stream(app)
    made = empty_pulls(monkeypatch, {2, 3}, send=False)
    assert await read_all(client, stream) == list(range(COUNT))
    assert len(made) == 5  # the two empty pulls were followed by three that read


async def test_deliveries_arriving_after_their_pull_gave_up_are_read(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last pull's messages come late: the consumer has nothing pending any more,
    yet they are read (they were sent, not yet received)."""
    client, stream = await stored_stream(app)
    made = empty_pulls(monkeypatch, {3}, send=True)
    assert await read_all(client, stream) == list(range(COUNT))
    assert len(made) == 4


async def test_a_read_that_never_gets_a_message_fails_loudly(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, stream = await stored_stream(app)
    empty_pulls(monkeypatch, set(range(2, 100)), send=False)
    with pytest.raises(TransientError, match=f"{COUNT - 1000} message"):
        await read_all(client, stream)


async def test_a_stream_purged_mid_read_ends_the_read(app: App) -> None:
    """Messages removed under the reader are not waited for: the read ends with what
    it had read."""
    client, stream = await stored_stream(app)
    seen: list[int] = []
    async for stored in client.connection.messages.read(stream):
        seen.append(int(stored.data))
        if len(seen) == 1:
            await client.connection.messages.purge(stream)
    assert seen == list(range(1000))  # the first pull's, already received


async def test_a_reader_that_expired_mid_read_fails_loudly(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reading consumer gone (its inactivity threshold passed while the caller held
    the read): an error, not a short list passed off as the whole stream."""
    client, stream = await stored_stream(app)
    real = messages._pulled
    pulls: list[int] = []

    async def pulled(puller: Puller, batch: int) -> list[Delivery]:
        pulls.append(1)
        if len(pulls) == 1:
            return await real(puller, batch)
        reader = puller._next.rsplit(".", 1)[-1]
        await client.connection.messages._drop_consumer(stream, reader)
        return []

    monkeypatch.setattr(messages, "_pulled", pulled)
    with pytest.raises(TransientError, match="reader expired"):
        await read_all(client, stream)
