"""Bulk enqueue as atomic batches (ADR-50), against a real server: `enqueue_many` stores a
queue's messages in batches of at most 1,000 (one write to disk each), a batch the server
refuses is published again message by message, and a message published again with its
batch's headers (a retry, a requeued dead letter) is stored like any other."""

from __future__ import annotations

from typing import Any

import nats
import pytest

from taskq import App
from taskq.bulk import BATCH, publish_many
from taskq.errors import UnsafeName
from taskq.task import CallOptions


@pytest.fixture
def noop(app: App) -> object:
    @app.task
    async def noop(n: int = 0) -> None:
        return None

    return noop


async def test_enqueue_many_stores_a_queue_s_messages_as_atomic_batches(
    app: App, noop: object
) -> None:
    # Given a queue stream (made by this taskq: it allows atomic publishes)
    count = 2 * BATCH + 500
    # When 2,500 tasks are enqueued in bulk
    handles = await noop.enqueue_many(range(count))  # type: ignore[attr-defined]
    # Then all are stored once, in order, in three batches of at most 1,000 messages
    client = await app.client()
    stream = app.names.queue_stream("default")
    assert (await client.connection.streams.state(stream)).messages == count
    batches = []
    for seq in (1, BATCH, BATCH + 1, count):
        stored = await client.connection.messages.get(stream, seq)
        assert stored is not None and stored.headers is not None
        assert stored.headers["Nats-Msg-Id"] == handles[seq - 1].id
        batches.append((stored.headers["Nats-Batch-Id"], stored.headers["Nats-Batch-Sequence"]))
    assert batches[0][0] == batches[1][0] != batches[2][0] != batches[3][0]
    assert [n for _, n in batches] == ["1", str(BATCH), "1", "500"]
    assert not client.connection.batches_refused(stream)


async def test_a_batch_holding_a_message_stored_already_is_published_one_by_one(
    app: App, noop: object
) -> None:
    # Given two of three messages stored already (their ids in the dedup window)
    client = await app.client()
    stream = app.names.queue_stream("default")
    await client.ensure_queue("default")
    envelopes = [
        client.placed(noop.build_envelope([n], {}, CallOptions()), "default", None)  # type: ignore[attr-defined]
        for n in range(3)
    ]
    first = await publish_many(client, envelopes[:2], [stream] * 2)
    # When the three are published in bulk (a batch with a duplicate id: refused whole)
    again = await publish_many(client, envelopes, [stream] * 3)
    # Then the two come back as duplicates of their first copies and the third is stored
    assert [p.duplicate for p in again] == [True, True, False]
    assert [p.seq for p in again[:2]] == [p.seq for p in first]
    assert (await client.connection.streams.state(stream)).messages == 3


async def test_a_stream_made_without_atomic_publishes_still_takes_bulk_enqueues(
    app: App, noop: object, nats_url: str
) -> None:
    # Given a queue stream whose atomic publishes an operator turned off
    client = await app.client()
    await client.ensure_queue("default")
    stream = app.names.queue_stream("default")
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        config = (await js.stream_info(stream)).config
        config.allow_atomic = False
        await js.update_stream(config)
    finally:
        await nc.close()
    # When tasks are enqueued in bulk, twice
    await noop.enqueue_many(range(1500))  # type: ignore[attr-defined]
    await noop.enqueue_many(range(10))  # type: ignore[attr-defined]
    # Then every one is stored, published message by message, and the stream is not sent
    # batches again by this client
    assert (await client.connection.streams.state(stream)).messages == 1510
    assert client.connection.batches_refused(stream)
    stored = await client.connection.messages.get(stream, 1510)
    assert stored is not None and "Nats-Batch-Id" not in (stored.headers or {})


async def test_a_message_published_again_with_its_batch_s_headers_is_stored(
    app: App, noop: object
) -> None:
    # Given a message stored by an atomic batch (its headers name the batch)
    await noop.enqueue_many(range(3))  # type: ignore[attr-defined]
    client = await app.client()
    stream = app.names.queue_stream("default")
    stored = await client.connection.messages.get(stream, 1)
    assert stored is not None and stored.headers is not None
    assert "Nats-Batch-Id" in stored.headers
    # When it is published again with those headers (as a requeue or a retry copies them)
    headers = {**stored.headers, "Nats-Msg-Id": "again-1", "nats-batch-commit": "1"}
    ack = await client.connection.publish(stored.subject, stored.data, headers)
    # Then it is stored as a message of its own, without any batch's headers
    again = await client.connection.messages.get(stream, ack.seq)
    assert again is not None and again.data == stored.data
    assert not [name for name in again.headers or {} if name.lower().startswith("nats-batch")]
    assert (await client.connection.streams.state(stream)).messages == 4


class Tagging:
    """Enqueue middleware that adds one header, as a user's may (here a hostile one)."""

    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value

    async def enqueue(self, envelope: Any, call_next: Any) -> None:
        envelope.headers[self.name] = self.value
        await call_next(envelope)


@pytest.mark.parametrize(
    ("name", "value"),
    [("X-Tenant", "acme\r\nNats-Msg-Id: forged"), ("X Tenant", "acme"), ("X:Tenant", "a")],
)
async def test_a_bulk_enqueue_with_an_unsafe_header_sends_nothing(
    nats_url: str, prefix: str, name: str, value: str
) -> None:
    # Given an app whose enqueue middleware adds a header that cannot go on a header line
    app = App(url=nats_url, prefix=prefix, middleware=[Tagging(name, value)])
    try:

        @app.task
        async def noop(n: int = 0) -> None:
            return None

        client = await app.client()
        await client.ensure_queue("default")
        # When tasks are enqueued in bulk (as atomic batches, written as raw frames)
        with pytest.raises(UnsafeName):
            await noop.enqueue_many(range(5))
        # Then nothing was stored and the connection is still up for the next publish
        stream = app.names.queue_stream("default")
        assert (await client.connection.streams.state(stream)).messages == 0
        plain = App(url=nats_url, prefix=prefix)
        try:
            await plain.task(noop.fn, name="noop").enqueue_many(range(3))  # type: ignore[attr-defined]
        finally:
            await plain.aclose()
        assert (await client.connection.streams.state(stream)).messages == 3
    finally:
        await app.aclose()
