"""Creating what a worker consumes from: queue streams, their consumers, the DLQ and the
advisory capture stream; idempotent, and drift in a config is applied as an update."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from taskq.app import App
from taskq.jetstream import Broker
from taskq.partitions import Part, layout, queues_in
from taskq.schedules import register
from taskq.topology import (
    check_owner,
    dlq_stream,
    events_stream,
    queue_consumer,
    queue_stream,
    results_bucket,
)

log = logging.getLogger("taskq.worker")
DEFAULT_ACK_WAIT = 30.0


@dataclass(frozen=True)
class QueueSetup:
    """One stream a worker consumes: a queue's, or one partition of a queue."""

    queue: str
    partition: Part
    stream: str
    durable: str
    ack_wait: float  # the consumer's real ack_wait, read back from the server


async def prepare(app: App, broker: Broker, queues: list[str]) -> dict[str, QueueSetup]:
    """Ensure every object the worker needs exists with the intended config; the streams
    to consume, by stream name (every partition of every queue)."""
    names, settings = app.names, app.settings
    await broker.ensure_stream(dlq_stream(names, settings))
    await broker.ensure_bucket(results_bucket(names, settings))
    existing = await broker.streams_subjects()
    on_server = queues_in(existing, names)
    setups: dict[str, QueueSetup] = {}
    for queue in queues:
        wanted = layout(await app.queue_partitions(queue))
        for part in wanted:
            spec = queue_stream(names, settings, queue, part)
            check_owner(spec, existing.get(spec.name))
            await broker.ensure_stream(spec)
        # streams of an earlier layout (partitions added or removed) may still hold tasks
        left = [p for p in on_server.get(queue, []) if p not in wanted]
        for part in wanted + left:
            setup = await _consumer(app, broker, queue, part)
            setups[setup.stream] = setup
    await ensure_events(app, broker, list(setups))
    for periodic in app.periodics.values():
        if periodic.queue in queues:  # idempotent: unchanged schedules are left alone
            await register(app, periodic)
    return setups


async def _consumer(app: App, broker: Broker, queue: str, part: Part) -> QueueSetup:
    tasks = [t for t in app.tasks.values() if t.queue == queue]
    # ack_wait is a property of the shared consumer, so the queue's shortest wins: a
    # crashed worker's task comes back as soon as the most impatient task asks.
    ack_wait = min((t.ack_wait for t in tasks), default=DEFAULT_ACK_WAIT)
    attempts = max((t.policy.attempts for t in tasks), default=1)
    spec = queue_consumer(app.names, app.settings, queue, ack_wait, attempts, part)
    await broker.ensure_consumer(spec)
    state = await broker.consumer_state(spec.stream, spec.durable)
    return QueueSetup(queue, part, spec.stream, spec.durable, state.ack_wait or ack_wait)


async def ensure_events(app: App, broker: Broker, streams: list[str]) -> None:
    """Add this worker's queue streams to the advisory capture stream's subjects.

    Workers with different queues update the subject list concurrently, so re-read and
    retry until ours are all present (a lost update is repaired on the next round).
    """
    names, settings = app.names, app.settings
    wanted = {names.max_deliveries_subject(s) for s in streams}
    for _ in range(10):
        current = set(await broker.stream_subjects(names.events_stream) or ())
        if wanted <= current:
            return
        queue_streams = {
            s.removeprefix("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.").removesuffix(".*")
            for s in current | wanted
        }
        await broker.ensure_stream(events_stream(names, settings, tuple(sorted(queue_streams))))
    log.warning("could not settle the advisory stream's subjects; the sweeper may miss some")
