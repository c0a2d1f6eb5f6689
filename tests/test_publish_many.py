"""Many publishes in one socket write (`Connection.publish_many_nowait`, the settle group's
records) and many acks in one (`Connection.ack_all`): each message answered on its own, the same
checks and sealing as a single publish, and nothing sent when one name is unsafe."""

from __future__ import annotations

import pytest

from taskq import App
from taskq.errors import UnsafeName
from taskq.records.sealing import is_sealed
from taskq.topology.specs import queue_consumer, results_bucket
from tests.conftest import wait_until


async def test_each_publish_is_stored_and_answered(app: App) -> None:
    client = await app.client()
    kv, bucket = client.connection.kv, client.names.results_bucket
    await kv.ensure(results_bucket(client.names, client.settings))
    items = [(f"k{i}", f"v{i}".encode()) for i in range(50)]
    acks = [await ack for ack in await kv.put_many_nowait(bucket, items)]
    assert [a.seq for a in acks] == sorted({a.seq for a in acks})  # 50 distinct, in order
    for key, value in items:
        found = await kv.get(bucket, key)
        assert found is not None and found[0] == value


async def test_an_unsafe_subject_sends_nothing(app: App) -> None:
    client = await app.client()
    kv, bucket = client.connection.kv, client.names.results_bucket
    await kv.ensure(results_bucket(client.names, client.settings))
    with pytest.raises(UnsafeName):
        await kv.put_many_nowait(bucket, [("fine", b"1"), ("bad key\r\nPUB x 1", b"2")])
    assert await kv.get(bucket, "fine") is None  # checked before anything was written


async def test_sealed_and_oversized_bodies_as_a_single_publish_has_them(keyed: App) -> None:
    client = await keyed.client()
    kv, bucket = client.connection.kv, client.names.results_bucket
    await kv.ensure(results_bucket(client.names, client.settings))
    big = b"x" * (2 * client.connection.max_payload)  # over max_payload: claim-checked
    acks = await kv.put_many_nowait(bucket, [("small", b"plain"), ("big", big)])
    for ack in acks:
        await ack
    for key, value in (("small", b"plain"), ("big", big)):
        found = await kv.get(bucket, key)
        assert found is not None and found[0] == value
    raw = await client.connection.streams.state(f"KV_{bucket}")
    assert raw.messages == 2
    assert is_sealed(await _raw(keyed, bucket, "small"))


async def _raw(app: App, bucket: str, key: str) -> bytes:
    import nats

    nc = await nats.connect(app.settings.url)
    try:
        msg = await nc.jetstream().get_last_msg(f"KV_{bucket}", f"$KV.{bucket}.{key}")
        return bytes(msg.data or b"")
    finally:
        await nc.close()


async def test_acks_in_one_write_settle_every_delivery(app: App) -> None:
    """A pull of 20 messages acked with `Connection.ack_all`: the queue is empty afterwards (on a
    work-queue stream an ack removes the message), and acking again sends nothing."""

    @app.task(name="noop")
    async def noop(n: int) -> None: ...

    await noop.enqueue_many(range(20))
    client = await app.client()
    names = client.names
    stream = names.queue_stream("default")
    spec = queue_consumer(names, client.settings, "default", ack_wait=30.0, attempts=3)
    await client.connection.streams.ensure_consumer(spec)
    puller = await client.connection.pull(stream, "default")
    try:
        got = [d async for d in puller.stream(20, 5.0)]
    finally:
        await puller.close()
    assert len(got) == 20
    await client.connection.ack_all(got)
    await client.connection.ack_all(got)  # already settled: nothing sent, nothing raised

    async def emptied() -> bool:  # acks are not answered: the stream says when they landed
        return (await client.connection.streams.state(stream)).messages == 0

    await wait_until(emptied)


def test_what_passed_as_a_subject_is_still_checked_as_a_header_name() -> None:
    """The check remembers what passed, subjects apart from header names: `a:b` is a
    subject, never a header name (its colon would end the name early)."""
    from taskq.nats.pipeline import Passed, check

    passed = Passed()  # a connection's: nothing is remembered process-wide
    check("a:b", None, passed)
    check("a:b", None, passed)  # remembered: still fine
    assert "a:b" in passed.subjects and not passed.names
    with pytest.raises(UnsafeName):
        check("subject", {"a:b": "v"}, passed)
    with pytest.raises(UnsafeName):
        check("subject", {"Name": "line\r\nInjected: 1"}, passed)  # values: every time
    check("subject", {"Name": "v"}, passed)
    with pytest.raises(UnsafeName):
        check("subject", {"Name": "v\n"}, passed)
