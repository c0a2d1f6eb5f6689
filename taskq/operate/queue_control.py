"""Operator controls over a queue: pause and resume its delivery, purge its waiting tasks.

Every control acts on all the streams the queue has on the server (each partition, and any
stream of an earlier layout still holding tasks), so a partitioned queue pauses as one.

A pause is the server's consumer pause (nats-server >= 2.11, ADR-48) on the queue's shared
durable consumer: workers' pull requests simply wait, running tasks finish and settle, and
enqueueing is untouched. Workers need not know: a worker starting meanwhile updates the
consumer without resuming it. The server needs an end time, so "until resumed" is a pause
until `FOREVER`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from taskq.client import Client, ClientSource
from taskq.errors import ConfigError, UnknownQueue
from taskq.nats import ConsumerPause
from taskq.records.clock import format_time
from taskq.task import TaskSpec
from taskq.topology.names import check_queue, check_task
from taskq.topology.partitions import Part, parts_on_server
from taskq.topology.specs import queue_consumer

FOREVER = datetime(9999, 1, 1, tzinfo=UTC)  # a pause "until resumed"


@dataclass(frozen=True)
class QueuePause:
    """A queue's pause state: `until` is when it ends by itself (None: paused until
    resumed, or not paused); `streams` is how many streams it covers."""

    queue: str
    paused: bool
    until: datetime | None
    streams: int

    def to_dict(self) -> dict[str, Any]:
        """The `--json` object: `paused_until` is RFC 3339, or null."""
        return {
            "queue": self.queue,
            "paused": self.paused,
            "paused_until": None if self.until is None else format_time(self.until),
            "streams": self.streams,
        }


def ends(until: datetime | None) -> datetime | None:
    """When a pause ending at `until` ends by itself: None for a pause until resumed."""
    return None if until is None or until >= FOREVER else until


def pause_deadline(
    for_: float | timedelta | None = None, until: datetime | None = None
) -> datetime:
    """The end of a pause given as a duration (seconds or timedelta) or a time; neither
    means until resumed. ConfigError for both, or for an end that is not in the future."""
    if for_ is not None and until is not None:
        raise ConfigError("pause a queue for a duration or until a time, not both")
    now = datetime.now(UTC)
    if for_ is not None:
        seconds = for_.total_seconds() if isinstance(for_, timedelta) else float(for_)
        if seconds <= 0:
            raise ConfigError(f"a pause must last more than 0 seconds, not {seconds:g}")
        return now + timedelta(seconds=seconds)
    if until is None:
        return FOREVER
    end = until if until.tzinfo else until.replace(tzinfo=UTC)  # naive: UTC, as for eta=
    if end <= now:
        raise ConfigError(f"pause until {format_time(end)}: that time has passed")
    return end


async def pause_queue(
    source: ClientSource,
    queue: str,
    for_: float | timedelta | None = None,
    until: datetime | None = None,
) -> QueuePause:
    """Stop deliveries of `queue` (every stream) for `for_`, until `until`, or until
    resumed. Running tasks finish; enqueueing keeps working."""
    deadline = pause_deadline(for_, until)
    client = await source.client()
    parts = await queue_parts(client, queue)
    states = await asyncio.gather(*(_pause(client, queue, p, deadline) for p in parts))
    return _summary(queue, states)


async def resume_queue(source: ClientSource, queue: str) -> QueuePause:
    """Let workers receive `queue`'s tasks again (every stream). Workers' pull requests
    already waiting are not woken by the server: deliveries restart as they are re-sent,
    within a worker's fetch timeout (1 s by default)."""
    client = await source.client()
    parts = await queue_parts(client, queue)
    streams, names = client.connection.streams, client.names
    states = await asyncio.gather(
        *(streams.pause(names.queue_stream(queue, p), names.consumer(queue), None) for p in parts)
    )
    await asyncio.gather(*(_side_consumers(client, queue, p, None) for p in parts))
    return _summary(queue, states)


async def _side_consumers(client: Client, queue: str, part: Part, until: datetime | None) -> None:
    """Pause (or resume) the queue's other consumers in one stream: its concurrency lanes
    (`<queue>-c-...`) and priority levels (`<queue>-p<N>`), which deliver from it too."""
    streams, stream = client.connection.streams, client.names.queue_stream(queue, part)
    for durable in await streams.consumer_names(stream):
        if durable.startswith(f"{queue}-"):
            await streams.pause(stream, durable, until)


async def _pause(client: Client, queue: str, part: Part, until: datetime) -> ConsumerPause | None:
    streams, names = client.connection.streams, client.names
    stream, durable = names.queue_stream(queue, part), names.consumer(queue)
    await _side_consumers(client, queue, part, until)
    state = await streams.pause(stream, durable, until)
    if state is not None:
        return state
    # No worker has run here yet: create the consumer paused, so the first worker finds it
    # so. That worker then applies its own config (ack_wait, max_deliver) over this guess.
    spec = queue_consumer(names, client.settings, queue, TaskSpec.ack_wait, 1, part)
    await streams.create_consumer(spec, paused_until=until)
    return await streams.pause(stream, durable, until)  # it may have existed after all


def _summary(queue: str, states: list[ConsumerPause | None]) -> QueuePause:
    held = [s for s in states if s is not None and s.paused]
    # partitions pause together; should they differ, the latest end is the one to expect
    until = max((s.until or FOREVER for s in held), default=None)
    return QueuePause(queue, bool(held), ends(until), len(states))


async def queue_parts(client: Client, queue: str) -> list[Part]:
    """Every stream `queue` has on the server; UnknownQueue when it has none."""
    parts = await parts_on_server(client.connection, client.names, check_queue(queue))
    if not parts:
        raise UnknownQueue(queue)
    return parts


async def stored_tasks(source: ClientSource, queue: str, task: str | None = None) -> int:
    """How many tasks of `queue` (of `task` only, if given) its streams hold: what a purge
    would remove (waiting, and delivered but not yet acknowledged)."""
    client = await source.client()
    total = 0
    for stream, subject in await _targets(client, queue, task):
        state = await client.connection.streams.state(stream, subjects_filter=subject)
        total += sum(state.subjects.values())
    return total


async def purge_queue(
    source: ClientSource,
    queue: str,
    task: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Remove the tasks `queue` holds (of `task` only, if given) from every stream; returns
    how many. Schedules (delayed and periodic tasks) stay: see `taskq schedules rm`.
    `progress(n)` is called after each stream (partition) with the number it removed.

    A task running meanwhile finishes, and its result is recorded; its message is gone
    already, so its ack is a no-op and a retry it asks for does not happen.
    """
    client = await source.client()
    total = 0
    for stream, subject in await _targets(client, queue, task):
        purged = await client.connection.messages.purge(stream, subject)
        total += purged
        if progress:
            progress(purged)
    return total


async def _targets(client: Client, queue: str, task: str | None) -> list[tuple[str, str]]:
    """(stream, subject filter) pairs selecting `queue`'s tasks (of `task`) in each stream."""
    if task is not None:
        check_task(task)
    names = client.names
    targets = []
    for part in await queue_parts(client, queue):
        stream = names.queue_stream(queue, part)
        if task:  # in the queue's subject, its concurrency lane, its priority levels
            targets += [(stream, names.queue_subject(queue, task, part))]
            targets += [(stream, names.lane_subject(queue, task, part))]
            targets += [(stream, names.level_subject(queue, "*", task, part))]
        else:
            targets += [(stream, names.queue_filter(queue, part))]
            targets += [(stream, names.lane_filter(queue, part))]
            targets += [(stream, names.levels_filter(queue, part))]
    return targets
