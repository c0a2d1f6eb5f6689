"""Time skipping for `worker(app, time_skipping=True)`: once the worker's queues are idle,
the app's clock moves to the next thing due and the harness fires it itself, the way
Temporal's time-skipping test environment does, against the same real nats-server.

Everything in taskq that waits for time waits as a server-side schedule in its queue's timer
stream (taskq.records.schedules): a delayed task, a durable timer or a wait's timeout, a
task held by a rate limit, a debounce or a concurrency slot, and, in this mode, a retry's
backoff (workers/settle.py); the worker waits in-process only for what is due within
`SKIPPING_WAIT`. Firing a one-shot schedule is what the server would do, minus the wait:
the schedule is deleted first (so the server never fires it too; a schedule it fired
already is gone and skipped), then its task is published straight into its queue, as a
parked task's wake-up is (taskq.flowcontrol.held), marked fired so no worker holds it
again. A periodic schedule fires only under `advance()` (it never runs out: a drain would
never end); it stays stored, and each firing takes the run id of its due time, as the
server's do. An ended run's clean-up (`Taskq-Internal: expire`) is never fired: it would
move the clock by `results_ttl` and remove what the test reads.

The server's clock is not moved: leases, TTLs and the server's own firings keep real time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from taskq.client import Client
from taskq.cron import next_fire
from taskq.errors import ConfigError
from taskq.flowcontrol.held import FIRED, carried, dropped_told, send_now
from taskq.nats import StoredMessage
from taskq.records.clock import parse_time
from taskq.records.envelope import MSG_ID, TASK_HEADER
from taskq.records.firings import run_id
from taskq.records.schedules import INTERNAL, SCHEDULE, TARGET, stored_schedules
from taskq.testing.drain import DrainTimeout, drain

SKIPPING_WAIT = 0.01  # seconds: anything due later waits as a schedule the harness fires
UNFIRED = ("expire",)  # `Taskq-Internal` kinds never fired early


@dataclass(frozen=True)
class Due:
    """A schedule of `queue` due at `at` (epoch seconds, the app's clock)."""

    queue: str
    stored: StoredMessage
    at: float
    periodic: bool


class Skipper:
    """Drains a time-skipping TestWorker's queues, firing each schedule in time order."""

    def __init__(self, client: Client, queues: list[str]) -> None:
        self.client = client
        self.queues = queues
        self._fired: dict[str, float] = {}  # periodic schedule subject -> last due fired
        self._since = 0.0  # the start of the current advance()

    async def run(self, settled: Callable[[], int], timeout: float, until: float | None) -> None:
        """Drain, fire what is due next (up to `until`; None: every one-shot schedule),
        drain again, ...; then move the clock to `until`. DrainTimeout after `timeout`."""
        deadline = time.monotonic() + timeout
        self._since = self.client.clock.time()
        while True:
            left = max(deadline - time.monotonic(), 0.001)
            await drain(self.client, self.queues, settled, left, fired_by_server=False)
            due = await self._next(until)
            if due is None:
                break
            if time.monotonic() > deadline:
                raise DrainTimeout(timeout, 0, 0, 1)
            self.client.clock.skip_to(due.at)
            await self._fire(due)
        if until is not None:
            self.client.clock.skip_to(until)

    async def _next(self, until: float | None) -> Due | None:
        """The schedule due first (periodic ones only when `until` is given), if by `until`."""
        found: list[Due] = []
        for queue in self.queues:
            for stored in await stored_schedules(self.client, queue):
                due = self._due(queue, stored, until is not None)
                if due is not None:
                    found.append(due)
        first = min(found, key=lambda d: d.at, default=None)
        if first is None or (until is not None and first.at > until):
            return None
        return first

    def _due(self, queue: str, stored: StoredMessage, periodic: bool) -> Due | None:
        expression = stored.headers.get(SCHEDULE, "")
        if stored.headers.get(INTERNAL) in UNFIRED:
            return None
        if self.client.names.unfired(stored.headers.get(TARGET, "")) is None:
            return None  # not one of ours to move: it fires at its own time
        try:
            if expression.startswith("@at "):
                return Due(queue, stored, _one_shot(expression, stored.data), False)
            if not periodic:
                return None
            after = max(self._fired.get(stored.subject, 0.0), self._since)
            base = stored.time or datetime.now(UTC)
            moment = next_fire(expression, base, datetime.fromtimestamp(after, UTC))
        except (ConfigError, ValueError):  # a foreign schedule taskq cannot read
            return None
        return None if moment is None else Due(queue, stored, moment.timestamp(), True)

    async def _fire(self, due: Due) -> None:
        """Publish the schedule's task into its queue now (a one-shot one deleted first)."""
        connection, stored = self.client.connection, due.stored
        stream = self.client.names.timer_stream(due.queue)
        headers = {**carried(stored.headers, dropped_told(self.client)), FIRED: str(stored.seq)}
        if due.periodic:
            self._fired[stored.subject] = due.at
            task = stored.headers.get(TASK_HEADER, "")
            headers[MSG_ID] = run_id(due.queue, task, datetime.fromtimestamp(due.at, UTC))
        elif not await connection.messages.delete(stream, stored.seq):
            return  # the server fired it meanwhile
        else:
            headers[MSG_ID] = f"fired:{stream}:{stored.seq}"
        await send_now(self.client, stored, headers)
        if not due.periodic:
            await connection.release_claim(stored.data, stored.subject, stored.headers)


def _one_shot(expression: str, body: bytes) -> float:
    """When a one-shot schedule is due: an `@at` has whole seconds, rounded up, so a task
    whose `eta` (in its body) is within the second before is due at its `eta`."""
    at = parse_time(expression[4:].strip()).timestamp()
    try:
        eta = json.loads(body).get("eta") if body[:1] == b"{" else None
        exact = parse_time(eta).timestamp() if isinstance(eta, str) else at
    except (ValueError, AttributeError):
        return at  # not an envelope with a readable eta
    return exact if at - 1 <= exact <= at else at
