"""Periodic runs (issue 27): each run's id is unique across queues and stable for its run
(named after its due time), and runs that fired while no worker moved them follow the
schedule's `catch_up` policy instead of piling up to run later."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

import taskq
from taskq import App, ConfigError
from taskq.ids import safe_id
from taskq.nats import Delivery
from taskq.nats.types import StoredMessage
from taskq.records.firings import firing, run_id
from taskq.records.places import SCHEDULE_NEXT, SCHEDULER
from taskq.records.schedules import remove
from taskq.workers.setup import prepare
from taskq.workers.timers import move
from tests.conftest import run_cli, running_worker, wait_until

RUN_ID = re.compile(r"periodic:(?P<queue>[a-z]+):digest:(?P<due>\d{8}T\d{6}Z)")


async def test_periodic_run_ids_are_unique_across_queues_and_name_the_run(
    nats_url: str, prefix: str
) -> None:
    """Given a periodic task `digest` in two queues (two apps sharing a prefix), when both
    run a few times, then every run has its own id, named after its queue and due time
    (a whole second, one interval apart), the same for a retried attempt, and `taskq task`
    shows only that run's attempts."""
    seen: dict[str, list[str]] = {"a": [], "b": []}
    apps = []
    for queue in ("a", "b"):
        app = App(url=nats_url, prefix=prefix)

        @app.periodic(every=1, queue=queue, max_retries=1, catch_up="all")
        async def digest(q: str = queue) -> None:
            seen[q].append(taskq.current().id)
            if len(seen[q]) == 1:
                raise taskq.Retry(delay=0.1)  # the first run takes two attempts

        apps.append(app)
    async with running_worker(apps[0]), running_worker(apps[1]):
        await wait_until(lambda: min(len(s) for s in seen.values()) >= 4, timeout=30)
    for queue, ids in seen.items():
        assert ids[0] == ids[1]  # the retried attempt keeps its run's id
        runs = [RUN_ID.fullmatch(i) for i in ids[1:]]
        assert all(m is not None and m["queue"] == queue for m in runs), ids
        due = sorted({datetime.strptime(m["due"], "%Y%m%dT%H%M%S%z") for m in runs if m})
        assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(due)), ids
    assert not set(seen["a"]) & set(seen["b"])
    told = json.loads(run_cli(nats_url, prefix, "task", seen["a"][0], "--json").stdout)
    assert told["queue"] == "a" and [a["number"] for a in told["attempts"]] == [1, 2]
    for app in apps:
        await app.aclose()


def test_a_run_id_is_its_schedule_and_due_time() -> None:
    """Two firings of one schedule for one due time are one run (the mover publishes both
    under that id, and the server keeps the first); the due time is derived from the
    firing's `Nats-Schedule-Next`, for intervals and crons alike."""

    def fired(expression: str, next_at: str) -> dict[str, str]:
        return {
            SCHEDULER: "p.s.mail.periodic.billing.charge",
            SCHEDULE_NEXT: next_at,
            "Taskq-Periodic": expression,
            "Taskq-Catch-Up": "one",
        }

    every = firing("p", fired("@every 30s", "2026-11-25T10:00:30Z"))
    again = firing("p", fired("@every 30s", "2026-11-25T10:00:30Z"))
    assert every is not None and again is not None and every.run_id == again.run_id
    assert every.run_id == "periodic:mail:billing.charge:20261125T100000Z"
    assert every.period == 30 and every.catch_up == "one"
    assert safe_id(every.run_id).startswith("h.")  # no producer's message id can equal it
    nightly = firing("p", fired("0 0 3 * * *", "2026-11-26T03:00:00Z"))
    assert nightly is not None and nightly.due == datetime(2026, 11, 25, 3, tzinfo=UTC)
    assert not nightly.late(nightly.next_at.timestamp() - 1)
    assert nightly.late(nightly.next_at.timestamp())
    assert firing("p", {**fired("@every 30s", "purge")}) is None  # a one-shot: not a run
    assert firing("other", fired("@every 30s", "2026-11-25T10:00:30Z")) is None
    assert run_id("q", "t", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == (
        "periodic:q:t:20260102T030405Z"
    )


def test_catch_up_must_be_a_known_policy() -> None:
    app = App(prefix="p")
    with pytest.raises(ConfigError, match="catch_up must be one of 'skip', 'one', 'all'"):
        app.periodic(every=1, catch_up="latest")


FIRES = 4


@pytest.mark.parametrize(("policy", "runs"), [("skip", 0), ("one", 1), ("all", FIRES)])
async def test_runs_missed_while_no_worker_moved_them_follow_catch_up(
    nats_url: str, prefix: str, policy: str, runs: int
) -> None:
    """Given a schedule that fired FIRES+ times with no worker and then stopped, when a
    worker comes once every firing is older than its period: `skip` runs none (each counted
    as missed), `one` runs one, `all` runs every one."""
    declared = App(url=nats_url, prefix=prefix)

    @declared.periodic(every=1, queue="tick", catch_up=policy)
    async def beat() -> None: ...

    client = await declared.client()
    await prepare(declared, client, ["tick"])  # streams and the schedule; nothing moves
    timers, fired = client.names.timer_stream("tick"), client.names.fired_filter("tick")

    async def waiting() -> list[str]:
        """`Nats-Schedule-Next` of each firing waiting in the timer stream."""
        found, seq = [], 1
        while (stored := await client.connection.messages.next(timers, seq, fired)) is not None:
            found.append(stored.headers[SCHEDULE_NEXT])
            seq = stored.seq + 1
        return found

    await wait_until(lambda: _at_least(waiting, FIRES), timeout=30)
    assert await remove(declared, "tick", "periodic.beat")  # no more firings
    nexts = await waiting()
    latest = max(datetime.fromisoformat(n.replace("Z", "+00:00")) for n in nexts)
    await wait_until(lambda: time.time() > latest.timestamp() + 0.01)  # all late now
    ran: list[str] = []
    runner = App(url=nats_url, prefix=prefix)  # the task, without its schedule

    @runner.task(queue="tick", name="beat")
    async def beat_now() -> None:
        ran.append(taskq.current().id)

    async with running_worker(runner) as worker:
        expected = len(nexts) if policy == "all" else runs
        await wait_until(lambda: worker.stats["missed"] == len(nexts) - expected, timeout=30)
        await wait_until(lambda: len(ran) == expected and not worker._running, timeout=30)
    assert len(ran) == expected and len(set(ran)) == len(ran)
    assert set(ran) <= set(_runs(nexts))  # the runs that fired, under their own ids
    await declared.aclose()
    await runner.aclose()


async def _at_least(waiting: Callable[[], Awaitable[list[str]]], count: int) -> bool:
    return len(await waiting()) >= count


def _runs(nexts: list[str], queue: str = "tick") -> list[str]:
    due = [datetime.fromisoformat(n.replace("Z", "+00:00")) - timedelta(seconds=1) for n in nexts]
    return [run_id(queue, "beat", d) for d in due]


async def test_an_on_time_run_is_never_dropped(app: App) -> None:
    """With the default `skip`, a worker that is there runs every firing (moved within
    two seconds of firing: each is moved the moment it arrives)."""
    ran: list[str] = []

    @app.periodic(every=2)
    async def tick() -> None:
        ran.append(taskq.current().id)

    async with running_worker(app) as worker:
        await wait_until(lambda: len(ran) >= 3, timeout=20)
        assert worker.stats["missed"] == 0


async def test_two_firings_for_one_due_time_run_once(nats_url: str, prefix: str) -> None:
    """Given firings of a schedule, when each is moved twice (a mover that published a
    firing and died before its ack, so the firing came back), then the queue holds one
    message per due time and each run goes once: both moves publish under the run's id and
    the server keeps the first."""
    declared = App(url=nats_url, prefix=prefix)

    @declared.periodic(every=1, queue="dup", catch_up="all")
    async def beat() -> None: ...

    client = await declared.client()
    await prepare(declared, client, ["dup"])
    names, connection = client.names, client.connection
    timers, fired = names.timer_stream("dup"), names.fired_filter("dup")

    async def firings() -> list[StoredMessage]:
        found, seq = [], 1
        while (stored := await connection.messages.next(timers, seq, fired)) is not None:
            found.append(stored)
            seq = stored.seq + 1
        return found

    await wait_until(lambda: _count_at_least(firings, 3), timeout=30)
    assert await remove(declared, "dup", "periodic.beat")
    due = [stored.headers[SCHEDULE_NEXT] for stored in await firings()]
    puller = await connection.pull(timers, names.timer_consumer("dup"))
    async for delivery in puller.stream(len(due), 1.0):
        await move(client, cast(Delivery, AckLost(delivery)))
        await move(client, delivery)  # the firing back: moved again, then acknowledged
    await puller.close()
    queued = await connection.streams.state(names.queue_stream("dup"))
    assert queued.messages == len(due), (queued.messages, due)
    ran: list[str] = []
    runner = App(url=nats_url, prefix=prefix)

    @runner.task(queue="dup", name="beat")
    async def beat_now() -> None:
        ran.append(taskq.current().id)

    async with running_worker(runner) as worker:
        await wait_until(lambda: len(ran) >= len(due) and not worker._running)
    assert sorted(ran) == sorted(_runs(due, "dup")), ran  # one run per due time
    await declared.aclose()
    await runner.aclose()


class AckLost:
    """A delivery whose acknowledgement never reaches the server (the mover died first)."""

    def __init__(self, delivery: Delivery) -> None:
        self._delivery = delivery

    def __getattr__(self, name: str) -> Any:
        return getattr(self._delivery, name)

    async def ack(self) -> None:
        return None


async def _count_at_least(found: Callable[[], Awaitable[list[StoredMessage]]], count: int) -> bool:
    return len(await found()) >= count
