"""One firing of a periodic schedule: which run it is, and whether it came too late.

nats-server fires a schedule onto the timer stream with `Nats-Scheduler` (the schedule's
subject) and `Nats-Schedule-Next` (when it fires next) and the schedule's own headers; a
periodic schedule of taskq's also carries `Taskq-Periodic` (its expression) and
`Taskq-Catch-Up` (its policy). From these alone a worker knows, for any firing:

* **its run**: the time it was due (`@every N`: the next time minus N; a cron: the last
  matching second before the next time) and the run id named after it,
  `periodic:<queue>:<task>:<YYYYMMDDTHHMMSSZ>`. The id is the same for every copy of one
  run (a redelivered move, a second firing for the same time), unique across queues and
  tasks, and usable as an idempotency key: the mover publishes the run under it as its
  `Nats-Msg-Id`, so the server keeps one run per due time (docs/results-workflows-
  schedules.md). Its `:` keeps it apart from every id a producer can publish (a producer's
  id reaches the server as its safe form, which holds no `:`), so no enqueue can take a
  run's place;
* **whether it is late**: its next firing is due already (`Nats-Schedule-Next` has
  passed when a worker moves it), so the run is older than its period.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from taskq.cron import every_seconds, parse_cron
from taskq.errors import ConfigError
from taskq.records.clock import parse_time
from taskq.records.places import SCHEDULE_NEXT, SCHEDULER
from taskq.topology.names import Names

PERIODIC_HEADER = "Taskq-Periodic"  # on a periodic schedule and its firings: its expression
CATCH_UP_HEADER = "Taskq-Catch-Up"  # and what to do with a late firing
CATCH_UP = ("skip", "one", "all")


def check_catch_up(value: object) -> str:
    """A `catch_up=` policy, else ConfigError naming the ones there are."""
    if value not in CATCH_UP:
        raise ConfigError(
            f"catch_up must be one of {', '.join(map(repr, CATCH_UP))}, not {value!r}"
        )
    return str(value)


@dataclass(frozen=True)
class Firing:
    """One firing of a periodic schedule of `task` in `queue`, due at `due`."""

    queue: str
    task: str
    due: datetime
    next_at: datetime
    catch_up: str

    @property
    def run_id(self) -> str:
        return run_id(self.queue, self.task, self.due)

    @property
    def period(self) -> float:
        """Seconds from this run to the next."""
        return (self.next_at - self.due).total_seconds()

    def late(self, now: float) -> bool:
        """True when the next run was due already at `now` (epoch seconds)."""
        return now >= self.next_at.timestamp()


def run_id(queue: str, task: str, due: datetime) -> str:
    """The id of the run of periodic `task` in `queue` due at `due`."""
    return f"periodic:{queue}:{task}:{due.strftime('%Y%m%dT%H%M%SZ')}"


def firing(prefix: str, headers: Mapping[str, str] | None) -> Firing | None:
    """The periodic run a fired message is (None: not a firing of one of taskq's periodic
    schedules with a readable time: a delayed or held task, or a schedule from before
    these headers, which moves as it always did)."""
    found = headers or {}
    schedule = Names(prefix).parse_schedule_subject(found.get(SCHEDULER, ""))
    expression = found.get(PERIODIC_HEADER)
    if schedule is None or expression is None:
        return None
    queue, name = schedule
    kind, _, task = name.partition(".")
    if kind != "periodic" or not task:
        return None
    try:
        next_at = parse_time(found.get(SCHEDULE_NEXT, ""))
        due = due_before(expression, next_at)
    except (ValueError, ConfigError):  # `purge` (a one-shot), or a foreign expression
        return None
    if due is None:
        return None
    policy = found.get(CATCH_UP_HEADER, "")
    policy = policy if policy in CATCH_UP else "skip"  # the default, also for older schedules
    return Firing(queue, task, due, next_at, policy)


def due_before(expression: str, next_at: datetime) -> datetime | None:
    """When the run before the one due at `next_at` was due, for a schedule `expression`."""
    seconds = every_seconds(expression)
    if seconds is not None:
        return next_at - timedelta(seconds=seconds)
    return parse_cron(expression).before(next_at)
