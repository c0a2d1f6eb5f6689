"""What every queue is doing: waiting, in flight, redelivered, per task, dead, throughput."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from taskq.app import App
from taskq.errors import NotFound


@dataclass
class QueueStats:
    queue: str
    waiting: int  # stored, not yet delivered
    in_flight: int  # delivered, not yet acknowledged
    redelivered: int  # delivered more than once and not yet settled
    pulls_waiting: int  # open pull requests: roughly, idle worker fetch loops
    consumers: int
    dead: int  # records in the DLQ for this queue
    per_task: dict[str, int] = field(default_factory=dict)  # waiting + in flight, by task
    enqueued_per_s: float = 0.0
    settled_per_s: float = 0.0
    _last_seq: int = 0
    _messages: int = 0

    def public(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


async def discover_queues(app: App) -> list[str]:
    """Queue names of this prefix, read from the queue streams' subjects on the server."""
    broker = await app.broker()
    head = f"{app.names.prefix}.q."
    queues = []
    for name in await broker.stream_names():
        if not name.startswith(f"{app.names.prefix.upper()}_Q_"):
            continue
        for subject in await broker.stream_subjects(name) or ():
            if subject.startswith(head) and subject.endswith(".>"):
                queues.append(subject[len(head) : -2])
    return sorted(set(queues))


async def queue_stats(app: App, queue: str) -> QueueStats:
    broker = await app.broker()
    names = app.names
    stream = names.queue_stream(queue)
    state = await broker.stream_state(stream, subjects_filter=names.queue_filter(queue))
    try:
        consumer = await broker.consumer_state(stream, names.consumer(queue))
        pending, ack_pending = consumer.pending, consumer.ack_pending
        redelivered, pulls = consumer.redelivered, consumer.waiting
    except NotFound:  # no worker has ever run: everything stored is waiting
        pending, ack_pending, redelivered, pulls = state.messages, 0, 0, 0
    head = f"{names.prefix}.q.{queue}."
    per_task = {s[len(head) :]: n for s, n in sorted(state.subjects.items())}
    return QueueStats(
        queue=queue,
        waiting=pending,
        in_flight=ack_pending,
        redelivered=redelivered,
        pulls_waiting=pulls,
        consumers=state.consumers,
        dead=await _dead(app, queue),
        per_task=per_task,
        _last_seq=state.last_seq,
        _messages=state.messages,
    )


async def _dead(app: App, queue: str) -> int:
    broker = await app.broker()
    try:
        state = await broker.stream_state(
            app.names.dlq_stream, subjects_filter=f"{app.names.prefix}.dlq.{queue}.>"
        )
    except NotFound:
        return 0
    return sum(state.subjects.values())


async def snapshot(app: App, queues: list[str] | None, interval: float) -> list[QueueStats]:
    """Stats of each queue, with rates measured over `interval` seconds (0: no rates)."""
    names = queues or await discover_queues(app)
    first = [await queue_stats(app, q) for q in names]
    if interval <= 0:
        return first
    started = time.monotonic()
    await asyncio.sleep(interval)
    second = [await queue_stats(app, q) for q in names]
    elapsed = time.monotonic() - started
    for before, after in zip(first, second, strict=True):
        enqueued = after._last_seq - before._last_seq
        after.enqueued_per_s = enqueued / elapsed
        # what left the stream: added minus the change in what is stored
        after.settled_per_s = max(0, enqueued - (after._messages - before._messages)) / elapsed
    return second
