"""Creating what a worker consumes from: queue streams, their consumers, each queue's timer
stream and its mover's consumer, the DLQ and the advisory capture stream; idempotent. A
drifted config is applied as an update where the user may (an operator, `taskq provision`),
else a warning: the worker goes on with what the server has."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, replace

from taskq.app import App
from taskq.client import Client
from taskq.errors import NotFound
from taskq.flowcontrol.options import DEFAULT_PRIORITY
from taskq.flowcontrol.store import ensure_limits
from taskq.flowcontrol.usage import declaration, declare
from taskq.operate.queue_control import FOREVER, ends
from taskq.policy import DEFAULT_ACK_WAIT
from taskq.records.schedules import register
from taskq.retrying import retry_transient
from taskq.topology.partitions import Part, layout, queues_in
from taskq.topology.specs import (
    ConsumerSpec,
    check_owner,
    dlq_stream,
    events_stream,
    lane_consumer,
    level_consumer,
    queue_consumer,
    queue_stream,
    results_buckets,
    timer_consumer,
    timer_stream,
)

log = logging.getLogger("taskq.worker")


@dataclass(frozen=True)
class QueueSetup:
    """One stream a worker consumes: a queue's, or one partition of a queue."""

    queue: str
    partition: Part
    stream: str
    durable: str
    ack_wait: float  # the consumer's real ack_wait, read back from the server
    lane: str | None = None  # the task whose concurrency lane this consumer is
    # priority level: slots go to higher levels first (workers/slots.py)
    level: int = DEFAULT_PRIORITY  # the priority level it serves (higher first)
    on_demand: bool = False  # a priority level's loop: started when it has tasks, ends when drained

    @property
    def key(self) -> str:
        """Which fetch loop this is: a stream has a queue consumer and maybe lanes."""
        return f"{self.stream}/{self.durable}"

    @property
    def where(self) -> str:
        part = "" if self.partition is None else f" partition {self.partition}"
        lane = "" if self.lane is None else f" lane {self.lane}"
        level = f" priority {self.level}" if self.on_demand else ""
        return f"queue {self.queue}{part}{lane}{level}"


async def set_up(app: App, client: Client, queues: list[str]) -> dict[str, QueueSetup]:
    """`prepare`, retried: a transient failure, or a stream just made on a fresh cluster
    and not yet everywhere (NotFound), is tried again."""
    return await retry_transient(
        lambda: prepare(app, client, queues), what="worker set-up", also=(NotFound,)
    )


async def prepare(app: App, client: Client, queues: list[str]) -> dict[str, QueueSetup]:
    """Ensure every object the worker needs exists with the intended config; the consumers
    to fetch from, by `QueueSetup.key` (every partition of every queue, and the
    concurrency lanes of its tasks)."""
    names, settings, streams = client.names, client.settings, client.connection.streams
    client.site = await client.connection.sourcing.domain()
    await streams.ensure(dlq_stream(names, settings))
    for bucket in results_buckets(names, settings):
        await client.connection.kv.ensure(bucket)
    await ensure_limits(client)  # producers' flow-control records: they may not create it
    existing = await streams.listing(names.every_subject)
    on_server = queues_in(existing, names)
    setups: dict[str, QueueSetup] = {}
    for queue in queues:
        await streams.ensure(timer_stream(names, settings, queue))
        await streams.ensure_consumer(timer_consumer(names, settings, queue))
        wanted = layout(await client.queue_partitions(queue))
        for part in wanted:
            spec = queue_stream(names, settings, queue, part)
            check_owner(spec, existing.get(spec.name))
            await streams.ensure(spec)
        # streams of an earlier layout (partitions added or removed) may still hold tasks
        left = [p for p in on_server.get(queue, []) if p not in wanted]
        for part in wanted + left:
            main = await _consumer(app, client, queue, part)
            for setup in [main, *await ensure_lanes(app, client, main)]:
                setups[setup.key] = setup
    await ensure_events(client, sorted({s.stream for s in setups.values()}))
    for periodic in app.periodics.values():
        if periodic.queue in queues:  # idempotent: unchanged schedules are left alone
            await register(client, periodic)
    declared = [
        declaration(t.name, t.queue, t.priority, t.limits)
        for t in app.tasks.values()
        if t.queue in queues and t.limits is not None
    ]
    await declare(client, declared)  # for `taskq limits`
    return setups


def _queue_consumer(app: App, client: Client, queue: str, part: Part) -> ConsumerSpec:
    tasks = [t for t in app.tasks.values() if t.queue == queue]
    # ack_wait is a property of the shared consumer, so the queue's shortest wins: a
    # crashed worker's task comes back as soon as the most impatient task asks.
    ack_wait = min((t.ack_wait for t in tasks), default=DEFAULT_ACK_WAIT)
    attempts = max((t.policy.attempts for t in tasks), default=1)
    return queue_consumer(client.names, client.settings, queue, ack_wait, attempts, part)


async def _consumer(app: App, client: Client, queue: str, part: Part) -> QueueSetup:
    spec = _queue_consumer(app, client, queue, part)
    ack_wait = spec.ack_wait
    await client.connection.streams.ensure_consumer(spec)
    state = await client.connection.streams.consumer_state(spec.stream, spec.durable)
    setup = QueueSetup(queue, part, spec.stream, spec.durable, state.ack_wait or ack_wait)
    if state.paused:  # the update above kept the pause: say why nothing will arrive
        end = ends(state.pause_until)
        until = f"until {end.isoformat()}" if end else "until resumed"
        log.info("%s is paused %s (`taskq queues resume %s`)", setup.where, until, queue)
    return setup


async def ensure_lanes(app: App, client: Client, main: QueueSetup) -> list[QueueSetup]:
    """The concurrency lanes of `main`'s queue (one consumer per task with max_concurrency,
    its max_ack_pending the limit), paused like the queue's consumer if it is paused."""
    lanes = [t for t in app.tasks.values() if t.queue == main.queue and t.limits and t.limits.lane]
    found = []
    for task in lanes:
        assert task.limits is not None and task.limits.max_concurrency is not None
        spec = lane_consumer(
            client.names,
            client.settings,
            main.queue,
            task.name,
            task.limits.max_concurrency,
            task.ack_wait,
            task.policy.attempts,
            main.partition,
        )
        ack_wait = await _beside(client, main, spec) or task.ack_wait
        setup = QueueSetup(main.queue, main.partition, spec.stream, spec.durable, ack_wait)
        found.append(replace(setup, lane=task.name, level=task.priority))
    return found


async def ensure_level(app: App, client: Client, main: QueueSetup, level: int) -> QueueSetup:
    """The consumer of priority `level` of `main`'s stream (the queue consumer's settings on
    the level's subjects), paused if the queue's consumer is."""
    base = _queue_consumer(app, client, main.queue, main.partition)
    spec = level_consumer(client.names, base, main.queue, level, main.partition)
    ack_wait = await _beside(client, main, spec) or main.ack_wait
    setup = QueueSetup(main.queue, main.partition, spec.stream, spec.durable, ack_wait)
    return replace(setup, level=level, on_demand=True)


async def _beside(client: Client, main: QueueSetup, spec: ConsumerSpec) -> float:
    """Ensure a consumer beside `main`'s queue consumer (a lane, a priority level), paused
    if that one is paused (a new consumer starts paused; an update keeps a pause); its
    real ack_wait."""
    streams = client.connection.streams
    pause = await streams.consumer_state(main.stream, main.durable)
    if pause.paused:
        await streams.create_consumer(spec, paused_until=pause.pause_until or FOREVER)
    await streams.ensure_consumer(spec)
    return (await streams.consumer_state(spec.stream, spec.durable)).ack_wait


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
    """`default, orders (3 streams)`: the queues, each partitioned one with its number of
    streams (its lanes and priority levels are consumers on those streams, not streams)."""
    streams = Counter(queue for queue, _ in {(s.queue, s.stream) for s in setups})
    return ", ".join(q if streams[q] <= 1 else f"{q} ({streams[q]} streams)" for q in queues)
