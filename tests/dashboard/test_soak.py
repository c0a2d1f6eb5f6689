"""The memory of a dashboard process under live updates, measured (slow: run with
`pytest -m slow -n 0 -s tests/dashboard/test_soak.py`; TASKQ_SOAK_SECONDS sets the length).

A browser keeps the overview and a running task's page open (their event streams: the
queues every 2 s, the task every 0.5 s) while a worker runs a steady trickle of tasks and
the browser reloads the dead-letter page now and then; the dashboard's resident memory is
sampled every 10 s after a warm-up, and its growth per hour extrapolated from a least-
squares line through the second half of the samples. The first minutes still grow as
caches and buffers fill: a 9-minute run went 61.4 -> 63.6 MiB in its first 5.5 minutes,
then stayed at 63.6 for the last 3.5 (+16.2 MiB/hour over all of it, flat over its second
half); over the 4 minutes this test used to run, that warm-up read as +20-24 MiB/hour.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable

import psutil
import pytest
from playwright.async_api import Page

import taskq
from taskq import App
from tests.conftest import running_worker, wait_until
from tests.dashboard.conftest import DashboardProcess

SECONDS = float(os.environ.get("TASKQ_SOAK_SECONDS", "480"))
WARM_UP = 30.0


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 300)
async def test_dashboard_memory_under_live_updates(
    app: App, start_dashboard: Callable[..., DashboardProcess], page: Page
) -> None:
    dashboard = start_dashboard(process=True)  # its own process: its memory is measured

    @app.task(timeout=SECONDS + 600)
    async def long(steps: int) -> None:
        ctx = taskq.current()
        for i in range(steps):
            ctx.progress(i / steps, f"step {i}")
            await asyncio.sleep(0.2)

    @app.task(max_retries=0)
    async def tick(n: int) -> None:
        if n % 25 == 0:
            raise ValueError(f"tick {n} failed")

    async with running_worker(app, concurrency=8):
        handle = await long.enqueue(int((SECONDS + 120) / 0.2))
        await wait_until(lambda: handle.progress(), timeout=10)
        tab = await page.context.new_page()
        await page.goto(dashboard.url + "/")
        await tab.goto(dashboard.url + f"/tasks/{handle.id}")
        traffic = asyncio.create_task(_trickle(tick))
        try:
            samples = await _sample(dashboard, page)
        finally:
            traffic.cancel()
    _report(samples)


async def _trickle(tick: object) -> None:
    n = 0
    while True:
        n += 1
        await tick.enqueue(n)  # type: ignore[attr-defined]
        await asyncio.sleep(0.2)


async def _sample(dashboard: DashboardProcess, page: Page) -> list[tuple[float, float]]:
    process = psutil.Process(dashboard.pid)
    await asyncio.sleep(WARM_UP)
    samples: list[tuple[float, float]] = []
    started = time.monotonic()
    while time.monotonic() - started < SECONDS:
        samples.append((time.monotonic() - started, process.memory_info().rss / 2**20))
        extra = await page.context.new_page()  # a page load now and then, closed again
        await extra.goto(dashboard.url + "/dlq")
        await extra.close()
        await asyncio.sleep(10)
    return samples


def _report(samples: list[tuple[float, float]]) -> None:
    times = [t for t, _ in samples]
    rss = [m for _, m in samples]
    overall = statistics.linear_regression(times, rss).slope * 3600  # MiB per hour
    half = len(samples) // 2
    slope = statistics.linear_regression(times[half:], rss[half:]).slope * 3600
    print(
        f"\ndashboard RSS over {times[-1]:.0f} s of live updates (after {WARM_UP:.0f} s "
        f"warm-up): first {rss[0]:.1f} MiB, last {rss[-1]:.1f} MiB, min {min(rss):.1f}, "
        f"max {max(rss):.1f}; trend {slope:+.1f} MiB/hour over the second half "
        f"({overall:+.1f} over all); samples {[round(m, 1) for m in rss]}"
    )
    assert slope < 20, f"the dashboard's memory grows by {slope:.1f} MiB an hour"
