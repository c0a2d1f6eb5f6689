"""Bulk enqueue: many runs of one task, pipelined (publish now, collect the acks after).

Every argument set is validated before anything is published, so a bad item publishes
nothing. Each message still has its own `Nats-Msg-Id`, which makes re-publishing one whose
ack was lost safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any

from taskq.envelope import MSG_ID, TASK_HEADER, Envelope
from taskq.errors import ConfigError, TaskqError
from taskq.handle import TaskHandle
from taskq.jetstream import Broker, PubAck
from taskq.names import check_queue
from taskq.retrying import retry_transient

if TYPE_CHECKING:
    from taskq.task import CallOptions, Task

WINDOW = 2048  # acks outstanding at once: bounds memory and the server's pending replies


def split(item: Any) -> tuple[list[Any], dict[str, Any]]:
    """An item is an args list/tuple, a kwargs dict, or a single positional value."""
    if isinstance(item, dict):
        return [], dict(item)
    if isinstance(item, list | tuple):
        return list(item), {}
    return [item], {}


async def enqueue_many(
    task: Task[Any, Any], items: Iterable[Any], opts: CallOptions
) -> list[TaskHandle]:
    """Validate all `items`, then publish them pipelined; handles come back in order."""
    if opts.key is not None:
        raise ConfigError("enqueue_many takes no idempotency key: each item gets its own id")
    app = task.app
    envelopes = [app.build_envelope(task, *split(item), opts) for item in items]
    queue = check_queue(opts.queue or task.queue)
    parts = await app.spread(queue, len(envelopes), opts.partition_key)
    broker = await app.broker()
    subjects = {p: app.names.queue_subject(queue, task.name, p) for p in set(parts)}
    handles: list[TaskHandle] = []
    for start in range(0, len(envelopes), WINDOW):
        chunk = [
            (subjects[p], e)
            for p, e in zip(
                parts[start : start + WINDOW], envelopes[start : start + WINDOW], strict=True
            )
        ]
        acks = await _publish_chunk(broker, chunk)
        handles += [
            TaskHandle(e.id, e.task, queue, a.seq, a.duplicate, app)
            for (_, e), a in zip(chunk, acks, strict=True)
        ]
    return handles


async def _publish_chunk(broker: Broker, chunk: list[tuple[str, Envelope]]) -> list[PubAck]:
    waits: list[Awaitable[PubAck]] = []
    for subject, envelope in chunk:
        headers = {MSG_ID: envelope.id, TASK_HEADER: envelope.task}
        waits.append(await broker.publish_nowait(subject, envelope.encode(), headers))
    results = await asyncio.gather(*waits, return_exceptions=True)
    acks: list[PubAck] = []
    for (subject, envelope), result in zip(chunk, results, strict=True):
        if isinstance(result, PubAck):
            acks.append(result)
        elif isinstance(result, TaskqError):
            # ack lost or refused for a moment: publish again (same subject, so the same
            # stream's dedup window keeps it single)
            acks.append(await _republish(broker, subject, envelope))
        else:
            raise result
    return acks


async def _republish(broker: Broker, subject: str, envelope: Envelope) -> PubAck:
    headers = {MSG_ID: envelope.id, TASK_HEADER: envelope.task}
    body = envelope.encode()
    return await retry_transient(lambda: broker.publish(subject, body, headers), what="enqueue")
