"""Time skipping in taskq.testing (issue 41, item 2): a workflow's day of sleep, an hour's
wait for a signal that never comes and a step's 10-minute retry backoff, a countdown of an
hour, periodic runs and a rate limit's next window run in seconds, against the real server;
`wf.now()` and `taskq.current().now()` see the skipped time."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

import taskq
from taskq import App, Workflow
from taskq.errors import ConfigError
from taskq.server import EmbeddedServer
from taskq.testing import worker

DAY, HOUR = 86400.0, 3600.0


async def test_a_day_of_workflow_time_runs_in_seconds(taskq_server: EmbeddedServer) -> None:
    app = App()
    calls: list[datetime] = []

    @app.task(max_retries=2, backoff=600, backoff_max=3600, jitter=0)
    async def remind(user: str) -> str:
        calls.append(taskq.current().now())
        if len(calls) == 1:
            raise RuntimeError("the mail server is down")
        return f"reminded {user}"

    @app.workflow
    async def onboarding(wf: Workflow, user: str) -> dict[str, object]:
        began = wf.now()
        await wf.sleep(timedelta(days=1))
        answer = await wf.wait_for("replied", timeout=timedelta(hours=1))
        sent = await wf.run(remind, user)
        return {"waited": (wf.now() - began).total_seconds(), "answer": answer, "sent": sent}

    wall = time.monotonic()
    async with worker(app, time_skipping=True) as w:
        start = w.now()
        run = await onboarding.start("ada")
        await w.drain(timeout=60)
        result = await run.result(timeout=10)
        skipped = (w.now() - start).total_seconds()
    assert result["answer"] is None and result["sent"] == "reminded ada"
    # a day, then the hour's timeout, then ten minutes of backoff, all skipped
    assert result["waited"] >= DAY + HOUR + 600
    assert skipped >= DAY + HOUR + 600
    assert len(calls) == 2 and (calls[1] - calls[0]).total_seconds() >= 600
    assert time.monotonic() - wall < DAY  # (it took seconds: the bound is the point)


async def test_a_countdown_of_an_hour_runs_at_its_time(taskq_server: EmbeddedServer) -> None:
    app = App()
    seen: list[datetime] = []

    @app.task
    async def report() -> None:
        seen.append(taskq.current().now())

    async with worker(app, time_skipping=True) as w:
        handle = await report.options(countdown=HOUR).enqueue()
        due = w.now() + timedelta(seconds=HOUR)
        await w.drain()
    assert w.results[handle.id].state == "succeeded"
    assert seen[0] >= due - timedelta(seconds=1)  # never early, on the skipped clock
    assert seen[0] < due + timedelta(minutes=1)


async def test_advance_runs_each_periodic_firing_on_the_way(
    taskq_server: EmbeddedServer,
) -> None:
    app = App()
    ticks: list[str] = []

    @app.periodic(every=timedelta(minutes=10))
    async def tick() -> None:
        ticks.append(taskq.current().id)

    async with worker(app, time_skipping=True) as w:
        await w.advance(timedelta(hours=1))
        after_an_hour = len(ticks)
        await w.advance(timedelta(minutes=30))
    # every ten minutes from the second the schedule was stored (the hour's last firing
    # falls just past the first advance when that second was not a whole one)
    assert after_an_hour in (5, 6)
    assert len(ticks) == after_an_hour + 3 or (after_an_hour, len(ticks)) == (5, 9)
    assert len(set(ticks)) == len(ticks)  # one run per due time


async def test_a_rate_limit_next_window_comes_when_skipped(taskq_server: EmbeddedServer) -> None:
    app = App()
    starts: list[datetime] = []

    @app.task(rate_limit="1/h")
    async def sync_crm() -> None:
        starts.append(taskq.current().now())

    async with worker(app, time_skipping=True) as w:
        handles = [await sync_crm.enqueue() for _ in range(3)]
        await w.drain()
    assert [w.results[h.id].state for h in handles] == ["succeeded"] * 3
    gaps = [(b - a).total_seconds() for a, b in pairwise(starts)]
    assert len(gaps) == 2 and all(gap >= HOUR for gap in gaps)


async def test_without_time_skipping_nothing_skips(taskq_server: EmbeddedServer) -> None:
    app = App()

    @app.task
    async def later() -> None: ...

    async with worker(app) as w:
        with pytest.raises(ConfigError, match="time_skipping"):
            await w.advance(60)
        await later.options(countdown=HOUR).enqueue()
        await w.drain()
        assert abs((w.now() - datetime.now(UTC)).total_seconds()) < 5
    assert w.results == {}  # its hour has not come
