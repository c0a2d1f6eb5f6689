"""Reading what a stream holds after a power cut, with plain nats-py; and the tasks the
power-cut tests enqueue before it."""

from __future__ import annotations

import json

import nats
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from taskq import App
from taskq.errors import NotFound
from tests.apps import reliable


async def streams_led(url: str) -> bool:
    """Whether every stream on the server at `url` has a leader and answers (after a
    cluster's restart, each stream elects its own, one after another)."""
    try:
        nc = await nats.connect(servers=url.split(","), allow_reconnect=False)
    except (NatsError, OSError):
        return False
    try:  # a raw listing: nats-py drops its `missing` (streams that did not answer)
        reply = json.loads((await nc.request("$JS.API.STREAM.LIST", b"{}", timeout=2)).data)
    except (NatsError, OSError, ValueError):
        return False
    finally:
        await nc.close()
    streams = reply.get("streams") or []
    led = all((i.get("cluster") or {}).get("leader") for i in streams)
    return "error" not in reply and not reply.get("missing") and led


async def enqueue_some(app: App, count: int) -> list[str]:
    """`count` tasks, half one by one and half with enqueue_many, all acknowledged."""
    ids = [f"p{i:04d}" for i in range(count)]
    for tid in ids[: count // 2]:
        await reliable.echo.enqueue(tid)
    await reliable.echo.enqueue_many([{"tid": tid} for tid in ids[count // 2 :]])
    return ids


async def stored_ids(app: App) -> set[str]:
    """Task ids of the messages in the default queue's stream (none if it is gone)."""
    try:
        return await ids_in_stream(app, app.names.queue_stream("default"))
    except NotFound:
        return set()


async def ids_in_stream(app: App, stream: str) -> set[str]:
    """The `tid` argument of every task stored in `stream` (NotFound if it is gone)."""
    return {_tid(body, seq) for seq, body in await bodies_in_stream(app, stream)}


async def task_ids_in_stream(app: App, stream: str) -> list[str]:
    """The task id of every message stored in `stream` (NotFound if it is gone)."""
    return [str(json.loads(body)["id"]) for _, body in await bodies_in_stream(app, stream)]


async def bodies_in_stream(app: App, stream: str) -> list[tuple[int, bytes]]:
    """(sequence, body) of every message stored in `stream` (NotFound if it is gone)."""
    nc = await nats.connect(servers=app.settings.url.split(","), allow_reconnect=False)
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(stream)
        except NotFoundError:
            raise NotFound(f"stream {stream} not found") from None
        found: list[tuple[int, bytes]] = []
        seq = 1
        while True:
            try:
                msg = await js.get_msg(stream, seq=seq, subject=">", next=True)
            except NotFoundError:
                return found
            found.append((msg.seq or seq, msg.data or b""))
            seq = (msg.seq or seq) + 1
    finally:
        await nc.close()


def _tid(body: bytes, seq: int) -> str:
    """The reliability apps' tasks carry their test id as `tid` (first argument)."""
    try:
        envelope = json.loads(body)
        return str(envelope.get("kwargs", {}).get("tid") or envelope["args"][0])
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return f"seq:{seq}"
