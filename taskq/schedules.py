"""Server-side schedules (ADR-51 message schedules): delayed tasks and periodic tasks.

No beat process: a schedule is a message on `<prefix>.s.<queue>.<name>` in the queue's own
stream (`<prefix>.ps.<queue>.<partition>.<name>` in one partition's stream), carrying
`Nats-Schedule` (`@at <time>`, `@every 5s`, or a 6-field cron with seconds) and
`Nats-Schedule-Target` (the task subject, in the same stream). The server publishes the body
to the target when due; a schedule subject holds one schedule, so publishing again replaces
it, and purging the subject cancels it. Needs nats-server 2.12 or later.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import to_json

from taskq.client import Client, ClientSource, Published
from taskq.cron import next_fire
from taskq.envelope import MSG_ID, TASK_HEADER, Envelope, format_time
from taskq.errors import BrokerError, ConfigError
from taskq.nats import Connection, PubAck
from taskq.retrying import retry_transient
from taskq.topology.partitions import Part, parts_on_server, queues_on_server

SCHEDULE = "Nats-Schedule"
TARGET = "Nats-Schedule-Target"
PERIODIC = "periodic"  # schedule-name prefix of periodic tasks: <prefix>.s.<queue>.periodic.<task>
MIN_SERVER = "2.12"
_EVERY = re.compile(r"^@every (\d+)(s|m|h)$")


@dataclass(frozen=True)
class Periodic:
    """A periodic task's schedule: `cron` (6 fields, seconds first) or `every`."""

    task: str
    queue: str
    expression: str  # the Nats-Schedule value
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        return f"{PERIODIC}.{self.task}"


def expression(cron: str | None, every: timedelta | float | None) -> str:
    """The `Nats-Schedule` value for a periodic task, validated at declaration."""
    if (cron is None) == (every is None):
        raise ConfigError("a periodic task needs exactly one of cron= or every=")
    if cron is not None:
        if cron.startswith("@"):
            if cron in ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@hourly"):
                return cron
            raise ConfigError(f"unknown cron shorthand {cron!r}")
        if len(cron.split()) != 6:
            raise ConfigError(
                f"cron {cron!r} must have 6 fields, seconds first (e.g. '0 */5 * * * *')"
            )
        return cron
    seconds = every.total_seconds() if isinstance(every, timedelta) else float(every or 0)
    if seconds < 1 or seconds != int(seconds):
        raise ConfigError("every= must be a whole number of seconds, at least 1")
    return f"@every {int(seconds)}s"


def at_expression(moment: datetime) -> str:
    """`@at` with whole seconds, rounded up: a delayed task never runs early."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    whole = datetime.fromtimestamp(math.ceil(moment.timestamp()), UTC)
    return "@at " + whole.strftime("%Y-%m-%dT%H:%M:%SZ")


def due_time(countdown: float | None, eta: datetime | None) -> datetime | None:
    """When a delayed task is due, or None to send it now."""
    if eta is not None:
        return eta if eta.tzinfo else eta.replace(tzinfo=UTC)
    if countdown is not None and countdown > 0:
        return datetime.now(UTC) + timedelta(seconds=countdown)
    return None


async def publish_delayed(
    client: Client, envelope: Envelope, due: datetime, part: Part
) -> Published:
    """Store a one-shot schedule that publishes the placed `envelope` to its subject at
    `due` (a schedule's target must be in its own stream: the partition `part`)."""
    headers = {
        **envelope.headers,
        SCHEDULE: at_expression(due),
        TARGET: envelope.subject,
        MSG_ID: f"{envelope.id}.schedule",
        TASK_HEADER: envelope.task,
    }
    subject = client.names.schedule_subject(envelope.queue, envelope.id, part)
    body = envelope.encode()
    ack = await retry_transient(lambda: _publish(client.connection, subject, body, headers))
    return Published(envelope.id, envelope.task, envelope.queue, ack.seq, ack.duplicate)


async def register(client: Client, periodic: Periodic) -> None:
    """Create or replace one periodic schedule (idempotent: same subject, one schedule).

    On a partitioned queue the schedule's name picks its partition, so it stays put."""
    body = to_json(
        {
            "task": periodic.task,
            "args": list(periodic.args),
            "kwargs": dict(periodic.kwargs),
            "meta": {"periodic": periodic.expression},
        }
    )
    names, connection = client.names, client.connection
    part = await client.place(periodic.queue, periodic.name)
    headers = {
        SCHEDULE: periodic.expression,
        TARGET: names.queue_subject(periodic.queue, periodic.task, part),
        TASK_HEADER: periodic.task,
    }
    subject = names.schedule_subject(periodic.queue, periodic.name, part)
    current = await connection.messages.last(names.queue_stream(periodic.queue, part), subject)
    unchanged = (
        current is not None
        and current.headers.get(SCHEDULE) == periodic.expression
        and current.data == body
    )
    if not unchanged:  # re-publishing an unchanged one would restart an interval's clock
        await retry_transient(lambda: _publish(connection, subject, body, headers))
    # after a queue's layout changed, the old stream's copy would fire as well
    on_server = await parts_on_server(connection, names, periodic.queue)
    await _purge(client, periodic.queue, periodic.name, [p for p in on_server if p != part])


async def _purge(client: Client, queue: str, name: str, parts: list[Part]) -> int:
    """Purge the schedule `name` from these streams of `queue`; how many were removed."""
    purged = 0
    for part in parts:
        purged += await client.connection.messages.purge(
            client.names.queue_stream(queue, part),
            subject=client.names.schedule_subject(queue, name, part),
        )
    return purged


async def _publish(
    connection: Connection, subject: str, body: bytes, headers: dict[str, str]
) -> PubAck:
    try:
        return await connection.publish(subject, body, headers)
    except BrokerError as exc:
        if "schedul" in str(exc).lower():
            raise BrokerError(
                f"the server refused a message schedule ({exc}): message schedules need "
                f"nats-server {MIN_SERVER} or later",
                exc.code,
                exc.status,
            ) from None
        raise


@dataclass(frozen=True)
class ScheduleInfo:
    """One stored schedule; times are RFC 3339 (`next_run` None: it will not fire again)."""

    queue: str
    name: str
    expression: str
    target: str
    seq: int
    stored_at: str | None = None
    next_run: str | None = None


async def list_schedules(
    source: ClientSource, queues: list[str] | None = None
) -> list[ScheduleInfo]:
    """Schedules stored in the given queues' streams (every partition's); no queues: in
    every queue on the server."""
    client = await source.client()
    # one listing for all the queues
    on_server = await queues_on_server(client.connection, client.names)
    found: list[ScheduleInfo] = []
    for queue in queues or list(on_server):
        for part in on_server.get(queue, []):
            found += await _schedules_in(client, queue, part)
    return found


async def _schedules_in(client: Client, queue: str, part: Part) -> list[ScheduleInfo]:
    names, connection = client.names, client.connection
    stream = names.queue_stream(queue, part)
    prefix = names.schedule_subject(queue, "", part)
    state = await connection.streams.state(
        stream, subjects_filter=names.schedule_filter(queue, part)
    )
    found = []
    for subject in sorted(state.subjects):
        stored = await connection.messages.last(stream, subject)
        if stored is not None:
            expression = stored.headers.get(SCHEDULE, "?")
            found.append(
                ScheduleInfo(
                    queue,
                    subject[len(prefix) :],
                    expression,
                    stored.headers.get(TARGET, "?"),
                    stored.seq,
                    format_time(stored.time) if stored.time else None,
                    _next_run(expression, stored.time),
                )
            )
    return found


def _next_run(expression: str, stored_at: datetime | None) -> str | None:
    now = datetime.now(UTC)
    try:
        moment = next_fire(expression, stored_at or now, now)
    except (ConfigError, ValueError):  # a foreign schedule taskq cannot read
        return None
    return format_time(moment) if moment is not None else None


async def remove(source: ClientSource, queue: str, name: str) -> bool:
    """Cancel a schedule by purging its subject (in whichever partition holds it); False
    if there was none."""
    client = await source.client()
    parts = await parts_on_server(client.connection, client.names, queue)
    return await _purge(client, queue, name, parts) > 0
