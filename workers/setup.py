"""Creating what a worker consumes from: queue streams, their consumers, the DLQ and the
advisory capture stream; idempotent, and drift in a config is applied as an update."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from taskq.app import App
from taskq.client import Client
from taskq.queue_control import ends
from taskq.schedules import register
from taskq.topology.partitions import Part, layout, queues_in
from taskq.topology.specs import (
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

    @property
    def where(self) -> str:
        part = "" if self.partition is None else f" partition {self.partition}"
        return f"queue {self.queue}{part}"


async def prepare(app: App, client: Client, queues: list[str]) -> dict[str, QueueSetup]:
    """Ensure every object the worker needs exists with the intended config; the streams
    to consume, by stream name (every partition of every queue)."""
    names, settings, streams = client.names, client.settings, client.connection.streams
    await streams.ensure(dlq_stream(names, settings))
    await client.connection.kv.ensure(results_bucket(names, settings))
    existing = await streams.listing(names.every_subject)
    on_server = queues_in(existing, names)
    setups: dict[str, QueueSetup] = {}
    for queue in queues:
        wanted = layout(await client.queue_partitions(queue))
        for part in wanted:
            spec = queue_stream(names, settings, queue, part)
            check_owner(spec, existing.get(spec.name))
            await streams.ensure(spec)
        # streams of an earlier layout (partitions added or removed) may still hold tasks
        left = [p for p in on_server.get(queue, []) if p not in wanted]
        for part in wanted + left:
            setup = await _consumer(app, client, queue, part)
            setups[setup.stream] = setup
    await ensure_events(client, list(setups))
    for periodic in app.periodics.values():
        if periodic.queue in queues:  # idempotent: unchanged schedules are left alone
            await register(client, periodic)
    return setups


async def _consumer(app: App, client: Client, queue: str, part: Part) -> QueueSetup:
    tasks = [t for t in app.tasks.values() if t.queue == queue]
    # ack_wait is a property of the shared consumer, so the queue's shortest wins: a
    # crashed worker's task comes back as soon as the most impatient task asks.
    ack_wait = min((t.ack_wait for t in tasks), default=DEFAULT_ACK_WAIT)
    attempts = max((t.policy.attempts for t in tasks), default=1)
    spec = queue_consumer(client.names, client.settings, queue, ack_wait, attempts, part)
    await client.connection.streams.ensure_consumer(spec)
    state = await client.connection.streams.consumer_state(spec.stream, spec.durable)
    setup = QueueSetup(queue, part, spec.stream, spec.durable, state.ack_wait or ack_wait)
    if state.paused:  # the update above kept the pause: say why nothing will arrive
        end = ends(state.pause_until)
        until = f"until {end.isoformat()}" if end else "until resumed"
        log.info("%s is paused %s (`taskq queues resume %s`)", setup.where, until, queue)
    return setup


async def ensure_events(client: Client, streams: list[str]) -> None:
    """Add this worker's queue streams to the advisory capture stream's subjects.

    Workers with different queues update the subject list concurrently, so re-read and
    retry until ours are all present (a lost update is repaired on the next round).
    """
    names, admin = client.names, client.connection.streams
    wanted = {names.max_deliveries_subject(s) for s in streams}
    for _ in range(10):
        current = set(await admin.subjects(names.events_stream) or ())
        if wanted <= current:
            return
        advised = {names.advised_stream(s) for s in current | wanted}
        queue_streams = tuple(sorted(s for s in advised if s))
        await admin.ensure(events_stream(names, client.settings, queue_streams))
    log.warning("could not settle the advisory stream's subjects; the sweeper may miss some")


def described(queues: list[str], setups: list[QueueSetup]) -> str:
    """`default,orders (3 streams)`: a queue's stream count when it is partitioned."""
    streams = Counter(s.queue for s in setups)
    return ",".join(q if streams[q] <= 1 else f"{q} ({streams[q]} streams)" for q in queues)
