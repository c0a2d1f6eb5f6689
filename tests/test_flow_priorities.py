"""Priorities: higher levels are delivered first under a backlog, across worker processes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from taskq import App, ConfigError
from tests.apps import flowctl
from tests.conftest import WorkerProcess, running_worker, wait_until
from tests.flow_helpers import events, flow_app, start_workers

__all__ = ["flow_app"]  # a fixture


async def test_a_late_high_priority_batch_overtakes_a_low_priority_backlog(
    flow_app: App, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    ledger = tmp_path / "ledger"
    low = flowctl.ranked.options(priority=1)
    high = flowctl.ranked.options(priority=9)
    # Given 1,000 priority-1 tasks queued and 2 worker processes draining them
    await low.enqueue_many([[f"low-{i}", 0.02] for i in range(1000)])
    await start_workers(worker_process, ledger, 2, concurrency=4)
    await wait_until(lambda: len(events(ledger)) >= 100, timeout=30)
    # When 50 priority-9 tasks are enqueued
    low_done_before = len(events(ledger))
    await high.enqueue_many([[f"high-{i}", 0.02] for i in range(50)])
    await wait_until(lambda: sum(r[1].startswith("high") for r in events(ledger)) == 50, 30)
    # Then all 50 finished before 90% of the low tasks then remaining did
    rows = events(ledger)
    last_high = max(at for _, token, at, _, _ in rows if token.startswith("high"))
    low_rows = [at for _, token, at, _, _ in rows if token.startswith("low")]
    overtaken = sum(1 for at in low_rows if at <= last_high) - low_done_before
    remaining = 1000 - low_done_before
    assert overtaken < 0.9 * remaining, (overtaken, remaining)
    print(f"priority-9 batch done after {overtaken} of {remaining} remaining priority-1 tasks")


async def test_lower_levels_still_run_under_a_stream_of_higher_ones(app: App) -> None:
    ran: list[int] = []

    @app.task
    async def work(level: int) -> None:
        ran.append(level)
        await asyncio.sleep(0.01)

    # Given a backlog at every level, the default included
    for level in (0, 3, 5, 9):
        await work.options(priority=level).enqueue_many([[level]] * 20)
    async with running_worker(app, concurrency=2):
        await wait_until(lambda: len(ran) == 80, timeout=30)
    # Then the levels ran highest first. The default level (5) has a loop of its own, which
    # takes tasks from its start, before the worker first looks at the levels: on a loaded
    # machine a good part of its twenty, so the order is judged among the other levels
    firsts = {level: ran.index(level) for level in (0, 3, 9)}
    assert firsts[9] < firsts[3] < firsts[0], ran
    levels = [level for level in ran if level != 5]
    assert sum(levels[:20]) / 20 > 8 and sum(levels[-20:]) / 20 < 1, ran


async def test_priority_options_are_checked(app: App) -> None:
    @app.task(max_concurrency=2, priority=7)
    async def laned(n: int) -> None: ...

    @app.task
    async def plain(n: int) -> None: ...

    for bad in (-1, 10, 2.5, "9", True):
        with pytest.raises(ConfigError):
            plain.options(priority=bad)
    with pytest.raises(ConfigError):

        @app.task(priority=11)
        async def too_high(n: int) -> None: ...

    with pytest.raises(ConfigError):  # a lane's priority is the task's
        await laned.options(priority=3).enqueue(1)
    assert (await laned.options(priority=7).enqueue(1)).queue == "default"
