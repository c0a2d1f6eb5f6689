"""Server-side schedules (ADR-51 message schedules): delayed tasks and periodic tasks.

No beat process: a schedule is a message on `<prefix>.s.<queue>.<name>` in the queue's timer
stream `<PREFIX>_T_<QUEUE>`, carrying `Nats-Schedule` (`@at <time>`, `@every 5s`, or a
6-field cron with seconds) and `Nats-Schedule-Target` (the fired form of the task's queue
subject, in the same stream: `taskq.topology.names`). The server publishes the body to the
target when due, and a worker moves it into the queue (`taskq.workers.timers`). A schedule
subject holds one schedule, so publishing again replaces it, and purging the subject cancels
it. Names: `task.<safe id>` (a delayed task), `periodic.<task>`, `held.…` (flow control).

Only workers write schedules: a producer's delayed task is an ordinary message with its
`eta`, which the first worker to see it turns into a schedule (docs/security.md: the server
lets a publish into a stream with schedules purge it, so producers get no such stream).
Needs nats-server 2.12 or later.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import to_json

from taskq.client import Client, ClientSource
from taskq.cron import next_fire, parse_cron
from taskq.errors import BrokerError, ConfigError, NotFound
from taskq.ids import safe_id
from taskq.nats import Connection, PubAck, StoredMessage
from taskq.records.clock import format_time
from taskq.records.envelope import TASK_HEADER
from taskq.records.firings import CATCH_UP_HEADER, PERIODIC_HEADER
from taskq.retrying import retry_transient
from taskq.topology.names import check_queue
from taskq.topology.partitions import queues_on_server

SCHEDULE = "Nats-Schedule"
# on a schedule taskq keeps for itself (a durable run's timers, deadline and expiry): such
# schedules are hidden from `taskq schedules ls` and the dashboard unless asked for
INTERNAL = "Taskq-Internal"
TARGET = "Nats-Schedule-Target"
PERIODIC = "periodic"  # schedule-name prefix of periodic tasks: <prefix>.s.<queue>.periodic.<task>
DELAYED = "task"  # of a delayed task's own schedule: <prefix>.s.<queue>.task.<safe id>
_ROOTS = (PERIODIC, DELAYED, "held")
MIN_SERVER = "2.12"
_EVERY = re.compile(r"^@every (\d+)(s|m|h)$")
_SCHEDULE_NAME = re.compile(r"[A-Za-z0-9_~=/-]+(?:\.[A-Za-z0-9_~=/-]+){0,8}")


@dataclass(frozen=True)
class Periodic:
    """A periodic task's schedule: `cron` (6 fields, seconds first) or `every`."""

    task: str
    queue: str
    expression: str  # the Nats-Schedule value
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    catch_up: str = "skip"  # what a late firing becomes (taskq.records.firings, workers/timers.py)

    @property
    def name(self) -> str:
        return f"{PERIODIC}.{self.task}"


def expression(cron: str | None, every: timedelta | float | None) -> str:
    """The `Nats-Schedule` value for a periodic task, validated at declaration."""
    if (cron is None) == (every is None):
        raise ConfigError("a periodic task needs exactly one of cron= or every=")
    if cron is not None:
        parse_cron(cron)  # every field, as nats-server will read it (taskq.cron)
        # one space between fields, as `taskq schedules ls` shows it
        return cron.strip() if cron.strip().startswith("@") else " ".join(cron.split())
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


def due_time(countdown: float | None, eta: datetime | None, now: datetime) -> datetime | None:
    """When a delayed task is due (a `countdown` counts from `now`), or None to send it now."""
    if eta is not None:
        return eta if eta.tzinfo else eta.replace(tzinfo=UTC)
    if countdown is not None and countdown > 0:
        return now + timedelta(seconds=countdown)
    return None


async def register(client: Client, periodic: Periodic) -> None:
    """Create or replace one periodic schedule (idempotent: same subject, one schedule).

    On a partitioned queue the schedule's name picks the partition its runs go to."""
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
        TARGET: names.fired_subject(names.queue_subject(periodic.queue, periodic.task, part)),
        TASK_HEADER: periodic.task,
        PERIODIC_HEADER: periodic.expression,  # the server copies these onto each firing
        CATCH_UP_HEADER: periodic.catch_up,
    }
    subject = names.schedule_subject(periodic.queue, periodic.name)
    current = await connection.messages.last(names.timer_stream(periodic.queue), subject)
    unchanged = (
        current is not None
        and all(current.headers.get(k) == v for k, v in headers.items())
        and current.data == body
    )
    if not unchanged:  # re-publishing an unchanged one would restart an interval's clock
        await retry_transient(lambda: _publish(connection, subject, body, headers))


async def _purge(client: Client, queue: str, name: str) -> int:
    """Purge the schedule `name` of `queue`; how many were removed (0 or 1)."""
    return await client.connection.messages.purge(
        client.names.timer_stream(queue), subject=client.names.schedule_subject(queue, name)
    )


async def _publish(
    connection: Connection, subject: str, body: bytes, headers: dict[str, str]
) -> PubAck:
    try:
        return await connection.publish(subject, body, headers)
    except BrokerError as exc:
        if "pattern" in str(exc).lower():  # 10189: an expression taskq did not check
            raise BrokerError(
                f"the server refused the schedule {headers.get(SCHEDULE)!r}: {exc}",
                exc.code,
                exc.status,
            ) from None
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
    internal: bool = False  # taskq's own (a durable run's timer, a held task), not a user's


async def list_schedules(
    source: ClientSource, queues: list[str] | None = None
) -> list[ScheduleInfo]:
    """Schedules stored in the given queues' timer streams; no queues: every queue's."""
    client = await source.client()
    on_server = await queues_on_server(client.connection, client.names)
    found: list[ScheduleInfo] = []
    for queue in queues or list(on_server):
        found += await _schedules_in(client, queue)
    return found


async def stored_schedules(client: Client, queue: str) -> list[StoredMessage]:
    """The schedule messages in `queue`'s timer stream, by subject (none: no timers yet)."""
    names, connection = client.names, client.connection
    stream = names.timer_stream(queue)
    try:
        state = await connection.streams.state(stream, subjects_filter=names.schedule_filter(queue))
    except NotFound:
        return []  # no timers yet: no worker has set the queue up
    found = []
    for subject in sorted(state.subjects):
        stored = await connection.messages.last(stream, subject)
        if stored is not None:
            found.append(stored)
    return found


async def _schedules_in(client: Client, queue: str) -> list[ScheduleInfo]:
    names = client.names
    prefix = names.schedule_subject(queue, "")
    found = []
    for stored in await stored_schedules(client, queue):
        name, expression = stored.subject[len(prefix) :], stored.headers.get(SCHEDULE, "?")
        found.append(
            ScheduleInfo(
                queue,
                name,
                expression,
                names.unfired(stored.headers.get(TARGET, "")) or "?",
                stored.seq,
                format_time(stored.time) if stored.time else None,
                _next_run(expression, stored.time),
                _internal(name, stored.headers),
            )
        )
    return found


def _internal(name: str, headers: dict[str, str]) -> bool:
    """Whether a schedule is taskq's own: marked so, or a task held by a limit."""
    return INTERNAL in headers or name.startswith("held.")


def users(schedules: list[ScheduleInfo], everything: bool = False) -> list[ScheduleInfo]:
    """The schedules a user made (periodic and delayed tasks); `everything`: all."""
    return schedules if everything else [s for s in schedules if not s.internal]


def _next_run(expression: str, stored_at: datetime | None) -> str | None:
    now = datetime.now(UTC)
    try:
        moment = next_fire(expression, stored_at or now, now)
    except (ConfigError, ValueError):  # a foreign schedule taskq cannot read
        return None
    return format_time(moment) if moment is not None else None


def delayed_name(task_id: str) -> str:
    """The schedule name of a delayed task (an `eta`): `task.<safe id>`."""
    return f"{DELAYED}.{safe_id(task_id)}"


async def remove(source: ClientSource, queue: str, name: str) -> bool:
    """Cancel a schedule by purging its subject (`name` as listed, or a delayed task's
    id); False if there was none."""
    client = await source.client()
    if name.split(".", 1)[0] not in _ROOTS:
        name = delayed_name(name)
    try:
        return await _purge(client, check_queue(queue), check_schedule_name(name)) > 0
    except NotFound:
        return False


async def drop_delayed(client: Client, queue: str, task_id: str) -> bool:
    """Remove the delayed schedule of task `task_id` (by its sequence: a worker may delete
    messages, not purge its queues' timer streams); False when there is none."""
    names = client.names
    subject = names.schedule_subject(queue, delayed_name(task_id))
    stored = await client.connection.messages.last(names.timer_stream(queue), subject)
    if stored is None:
        return False
    return await client.connection.messages.delete(names.timer_stream(queue), stored.seq)


def check_schedule_name(name: str) -> str:
    """A schedule name as `taskq schedules rm` takes it: whole subject tokens, no wildcard
    (`rm '>'` must not purge every schedule), else ConfigError."""
    if not _SCHEDULE_NAME.fullmatch(name):
        raise ConfigError(f"invalid schedule name {name[:80]!r}: see `taskq schedules ls`")
    return name
