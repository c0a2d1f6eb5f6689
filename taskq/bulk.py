"""Bulk enqueue: many task messages published at once, as atomic batches where the stream
allows them, else pipelined (publish now, collect the acks after).

An atomic batch (ADR-50) is stored all or none with one write to disk: with the server
syncing every write (`sync_interval: always`), one fsync per batch, not per message. Each
message still has its own `Nats-Msg-Id`, so publishing a message again is safe either way;
a batch the server refuses (one of its ids is a duplicate, too many batches in flight, a
stream made without atomic publishes) is published again message by message, pipelined.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from taskq.client import Client, Published
from taskq.errors import TaskqError
from taskq.ids import new_ids, safe_id
from taskq.middleware import Chain
from taskq.nats import PubAck
from taskq.records.envelope import MSG_ID, TASK_HEADER, Envelope
from taskq.retrying import retry_transient

WINDOW = 2048  # acks outstanding at once: bounds memory and the server's pending replies
BATCH = 1000  # messages per atomic batch: nats-server's default ceiling (limits.batch.max_msgs)


def from_template(
    template: Envelope, wired: list[tuple[list[Any], dict[str, Any]]]
) -> list[Envelope]:
    """A bulk enqueue's envelopes: `template` (the call's task, stamps and meta) with an id
    and validated arguments each, without a dataclass `__init__` per message; each with
    its own `meta` and `headers`, which enqueue middleware may change in place."""
    fields, meta = template.__dict__, template.meta
    envelopes = []
    for task_id, (args, kwargs) in zip(new_ids(len(wired)), wired, strict=True):
        envelope = object.__new__(Envelope)
        envelope.__dict__.update(
            fields, id=task_id, args=args, kwargs=kwargs, meta=dict(meta), headers={}
        )
        envelopes.append(envelope)
    return envelopes


@dataclass(frozen=True)
class Where:
    """Where a bulk enqueue's messages go: their queue, the task's lane or priority level,
    and the key that picks their partition (None: spread round robin)."""

    queue: str
    lane: bool
    level: int
    partition_key: str | None = None


async def enqueue_all(
    client: Client, middleware: Chain, envelopes: list[Envelope], where: Where
) -> list[Published] | None:
    """Place the envelopes (spread over the queue's partitions), run each through the
    enqueue middleware, then publish them all: what was stored, in order; None, publishing
    nothing, when a middleware did not call `call_next` exactly once."""
    queue = where.queue
    parts = await client.spread(queue, len(envelopes), where.partition_key)
    placed = [
        client.placed(envelope, queue, part, where.lane, where.level)
        for part, envelope in zip(parts, envelopes, strict=True)
    ]
    staged = await through_middleware(middleware, placed)
    if staged is None:
        return None
    streams = [client.names.queue_stream(queue, part) for part in parts]
    return await publish_many(client, staged, streams)


async def through_middleware(middleware: Chain, placed: list[Envelope]) -> list[Envelope] | None:
    """Each placed envelope run through the enqueue middleware, in order: what they send
    on, or None when one did not call `call_next` exactly once."""
    staged: list[Envelope] = []

    async def stage(final: Envelope) -> None:
        staged.append(final)

    for envelope in placed:
        await middleware.enqueue(envelope, stage)
    return staged if len(staged) == len(placed) else None


def split(item: Any) -> tuple[list[Any], dict[str, Any]]:
    """An item is an args list/tuple, a kwargs dict, or a single positional value."""
    if isinstance(item, dict):
        return [], dict(item)
    if isinstance(item, list | tuple):
        return list(item), {}
    return [item], {}


async def publish_many(
    client: Client, envelopes: list[Envelope], streams: list[str] | None = None
) -> list[Published]:
    """Publish placed envelopes (each with its `subject`; `streams`: the stream each goes
    to, which makes atomic batches of those bound for one stream); results in order.
    Every body is encoded before the first is sent: one the encoder refuses (a nan
    argument: ArgumentsError) publishes nothing."""
    bodies = [envelope.encode() for envelope in envelopes]
    acks: list[PubAck | None] = [None] * len(envelopes)
    if streams is not None:
        await _in_batches(client, envelopes, bodies, streams, acks)
    rest = [i for i, ack in enumerate(acks) if ack is None]
    for start in range(0, len(rest), WINDOW):
        window = rest[start : start + WINDOW]
        sent = await _pipelined(client, [(envelopes[i], bodies[i]) for i in window])
        for i, ack in zip(window, sent, strict=True):
            acks[i] = ack
    return [
        Published(e.id, e.task, e.queue, a.seq, a.duplicate)
        for e, a in zip(envelopes, acks, strict=True)
        if a is not None
    ]


async def _in_batches(
    client: Client,
    envelopes: list[Envelope],
    bodies: list[bytes],
    streams: list[str],
    acks: list[PubAck | None],
) -> None:
    """Publish the envelopes as atomic batches per stream, a window of batches at a time;
    fills `acks` for the batches stored (the others are left to the pipelined path)."""
    batches = [
        members[start : start + BATCH]
        for members in _by_stream(streams, client.connection.batches_refused)
        for start in range(0, len(members), BATCH)
    ]
    per_window = max(1, WINDOW // BATCH)
    for start in range(0, len(batches), per_window):
        window = batches[start : start + per_window]
        sent = [
            (members, await _send_batch(client, envelopes, bodies, members, streams[members[0]]))
            for members in window
        ]
        for members, waiting in sent:
            ack = await _batch_ack(waiting)
            if ack is not None:  # consecutive sequences, ending at the commit's
                first = ack.seq - len(members) + 1
                for k, i in enumerate(members):
                    acks[i] = PubAck(ack.stream, first + k, False)


def _by_stream(streams: list[str], refused: Callable[[str], bool]) -> list[list[int]]:
    """The envelopes' indexes grouped by their stream, in order (streams known to refuse
    atomic batches left out)."""
    groups: dict[str, list[int]] = {}
    for i, stream in enumerate(streams):
        if not refused(stream):
            groups.setdefault(stream, []).append(i)
    return list(groups.values())


async def _send_batch(
    client: Client, envelopes: list[Envelope], bodies: list[bytes], members: list[int], stream: str
) -> asyncio.Future[PubAck] | None:
    messages = [(envelopes[i].subject, bodies[i], _headers(envelopes[i])) for i in members]
    return await client.connection.publish_atomic(stream, messages)


async def _batch_ack(waiting: asyncio.Future[PubAck] | None) -> PubAck | None:
    """The batch's commit ack, or None: not sent, or refused."""
    if waiting is None:
        return None
    try:
        return await waiting
    except TaskqError:
        return None


def _headers(envelope: Envelope) -> dict[str, str]:
    return {**envelope.headers, MSG_ID: safe_id(envelope.id), TASK_HEADER: envelope.task}


async def _pipelined(client: Client, chunk: list[tuple[Envelope, bytes]]) -> list[PubAck]:
    """Publish each (envelope, its body) now, then collect the acks."""
    connection = client.connection
    waits: list[Awaitable[PubAck]] = []
    for envelope, body in chunk:
        waits.append(await connection.publish_nowait(envelope.subject, body, _headers(envelope)))
    results = await asyncio.gather(*waits, return_exceptions=True)
    acks: list[PubAck] = []
    for (envelope, body), result in zip(chunk, results, strict=True):
        if isinstance(result, PubAck):
            acks.append(result)
        elif isinstance(result, TaskqError):
            # ack lost or refused for a moment: publish again (same subject, so the same
            # stream's dedup window keeps it single)
            acks.append(await _republish(client, envelope, body))
        else:
            raise result
    return acks


async def _republish(client: Client, envelope: Envelope, body: bytes) -> PubAck:
    headers = _headers(envelope)
    return await retry_transient(
        lambda: client.connection.publish(envelope.subject, body, headers), what="enqueue"
    )
