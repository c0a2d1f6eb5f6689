"""`drain()`: wait until an app's queues are idle and every schedule due so far has run.

Idle means each queue's durable consumer has nothing waiting (`num_pending`) and nothing in
flight (`num_ack_pending`, which also holds a task waiting out a retry delay), seen twice in
a row with no task settled in between: a workflow's next step is published before its
predecessor is acknowledged (taskq.workflows.canvas), so a step moving from one queue to another
cannot fall between two reads. One-shot schedules (`countdown`, `eta`) due by the start of
the drain must have fired (the server deletes a fired `@at` schedule); a periodic schedule
that fell due within `LATENESS` before the start is given until then to fire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from taskq.client import Client
from taskq.cron import next_fire
from taskq.errors import NotFound, TaskqError
from taskq.records.clock import parse_time
from taskq.records.schedules import ScheduleInfo, list_schedules
from taskq.topology.partitions import Part, queues_on_server

POLL = 0.002  # seconds between looks at the consumers (each look: a request per stream)
# a periodic schedule fires this long after its time at the latest (nats-server 2.15.1 fires
# on whole seconds; median lateness measured 0.12 s, docs/testing.md)
LATENESS = 1.0


class DrainTimeout(TaskqError):
    """`drain()` ran out of time with work left."""

    def __init__(self, timeout: float, waiting: int, in_flight: int, schedules: int) -> None:
        self.timeout = timeout
        self.waiting = waiting
        self.in_flight = in_flight
        self.schedules = schedules
        super().__init__(
            f"queues not drained within {timeout:g}s: {waiting} waiting, {in_flight} in flight, "
            f"{schedules} schedule(s) due and not yet fired"
        )


async def drain(
    client: Client,
    queues: list[str],
    settled: Callable[[], int],
    timeout: float,
    fired_by_server: bool = True,
) -> None:
    """Return once `queues` are idle and (`fired_by_server`) the schedules due now have run
    (`settled()`: how many tasks this process's worker settled so far); DrainTimeout at
    `timeout` seconds. A time-skipping test fires schedules itself (taskq.testing.skipping)."""
    deadline = time.monotonic() + timeout
    hold_until, due = 0.0, set[str]()
    if fired_by_server:
        hold_until, due = _due(await list_schedules(client, queues), datetime.now(UTC))
    parts = await queues_on_server(client.connection, client.names)
    seen: int | None = None  # settled() at the last idle look
    while True:
        if due:
            due = _still_stored(await list_schedules(client, queues), due)
        waiting, in_flight = await _counts(client, {q: parts.get(q, []) for q in queues})
        quiet = not (due or waiting or in_flight) and time.time() >= hold_until
        if quiet and seen == settled():
            return
        seen = settled() if quiet else None
        if time.monotonic() > deadline:
            raise DrainTimeout(timeout, waiting, in_flight, len(due))
        await asyncio.sleep(POLL)


def _due(schedules: list[ScheduleInfo], start: datetime) -> tuple[float, set[str]]:
    """(time until which a periodic schedule may still fire, one-shot schedules due)."""
    hold_until = 0.0
    due: set[str] = set()
    for info in schedules:
        if info.expression.startswith("@at "):
            fires = next_fire(info.expression, start, start)
            if fires is not None and fires <= start:
                due.add(f"{info.queue}/{info.name}")
            continue
        stored = parse_time(info.stored_at) if info.stored_at else start
        try:
            fired = next_fire(info.expression, stored, start - timedelta(seconds=LATENESS))
        except ValueError:  # a foreign schedule taskq cannot read: not ours to wait for
            continue
        if fired is not None and fired <= start:
            hold_until = max(hold_until, fired.timestamp() + LATENESS)
    return hold_until, due


def _still_stored(schedules: list[ScheduleInfo], due: set[str]) -> set[str]:
    return due & {f"{info.queue}/{info.name}" for info in schedules}


async def _counts(client: Client, parts: dict[str, list[Part]]) -> tuple[int, int]:
    """(waiting, in flight) summed over every stream of the queues, and the fired tasks
    their timer streams still hold (a worker moves them into the queue)."""
    names, streams = client.names, client.connection.streams
    waiting = in_flight = 0
    for queue, queue_parts in parts.items():
        try:
            timers = await streams.consumer_state(
                names.timer_stream(queue), names.timer_consumer(queue)
            )
            waiting, in_flight = waiting + timers.pending, in_flight + timers.ack_pending
        except NotFound:
            pass  # no timers yet
        for part in queue_parts:
            stream = names.queue_stream(queue, part)
            try:
                state = await streams.consumer_state(stream, names.consumer(queue))
            except NotFound:  # no consumer (yet): what is stored waits
                stored = await streams.state(
                    stream, subjects_filter=names.queue_filter(queue, part)
                )
                waiting += stored.messages
                continue
            waiting += state.pending
            in_flight += state.ack_pending
    return waiting, in_flight
