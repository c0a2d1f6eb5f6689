"""The history in the browser (issue 44): after a run of mixed tasks the overview, the queue
page and a task's own page chart the last hour's throughput, failures and run-time
percentiles from the server (a new tab shows the same), `/api/history` lists the windows,
and the charts work read-only. Real Chromium, real worker, real server."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from playwright.async_api import Page, expect

from taskq import App
from taskq.operate.history import history
from taskq.records.history import Window
from tests.conftest import running_worker, wait_until
from tests.dashboard.conftest import Dashboard, shoot

FIELDS = {"start", "seconds", "succeeded", "failed", "retried"} | {
    f"runtime_p{n}" for n in (50, 95, 99)
}


def declare(app: App) -> None:
    @app.task
    async def fast(n: int) -> int:
        return n

    @app.task
    async def slow(n: int) -> int:
        await asyncio.sleep(0.15)
        return n

    @app.task(max_retries=1, backoff=0.05, jitter=0)
    async def doomed(n: int) -> None:
        raise ValueError("never")


async def run_mixed(app: App) -> None:
    """12 fast, 3 slow, 2 doomed (each retried once): in the history once it says so."""
    for n in range(12):
        await app.tasks["fast"].enqueue(n)
    for n in range(3):
        await app.tasks["slow"].enqueue(n)
    for n in range(2):
        await app.tasks["doomed"].enqueue(n)
    client = await app.client()

    async def recorded() -> bool:
        total = Window(0, 0)
        for window in await history(client):
            total.add(window)
        return (total.succeeded, total.failed, total.retried) == (15, 2, 2)

    await wait_until(recorded, timeout=30)


async def test_overview_queue_and_task_pages_chart_the_last_hour(
    app: App, dashboard: Dashboard, page: Page, browser: object
) -> None:
    declare(app)
    async with running_worker(app, concurrency=8):
        await run_mixed(app)
        await page.goto(dashboard.url + "/")
        section = page.locator('[data-section="history"]')
        await expect(section.locator('[data-field="succeeded"]')).to_have_text("15")
        await expect(section.locator('[data-field="failed"]')).to_have_text("2")
        await expect(section.locator('[data-field="retried"]')).to_have_text("2")
        bars = section.locator('svg[data-chart="throughput"]')
        assert await bars.locator("rect.ok").count() >= 1
        assert await bars.locator("rect.fail").count() >= 1
        assert await section.locator('svg[data-chart="runtimes"] polyline.p99').count() >= 1
        # the queue page: the queue's charts, and a link to each task's own page
        await page.goto(dashboard.url + "/queues/default")
        await expect(
            page.locator('[data-section="history"] [data-field="succeeded"]')
        ).to_have_text("15")
        await page.locator('[data-task-history="slow"]').click()
        await expect(page).to_have_url(re.compile(r"/history\?task=slow$"))
        await expect(page.locator("h1")).to_contain_text("Task slow")
        await expect(page.locator('[data-field="succeeded"]')).to_have_text("3")
        p50 = await page.locator('[data-field="p50"]').inner_text()
        assert p50.endswith(" ms") and 130 <= float(p50.split()[0]) < 1000, p50
        await shoot(page, "history")
        # the day's view of the same task: 5-minute windows, the same counts
        await page.locator('a[href="/history?task=slow&span=24h"]').click()
        await expect(page.locator('[data-field="succeeded"]')).to_have_text("3")


async def test_a_new_tab_shows_what_the_server_kept(
    app: App, dashboard: Dashboard, page: Page, start_dashboard: Callable[..., Dashboard]
) -> None:
    """Nothing lives in the tab: a page opened after the worker stopped, and a read-only
    dashboard started after it, chart the same windows."""
    declare(app)
    async with running_worker(app, concurrency=8):
        await run_mixed(app)
    windows = await dashboard.http.api("/history?task=doomed")
    assert isinstance(windows, list) and len(windows) == 361
    assert all(set(w) == FIELDS for w in windows)
    failed = [w for w in windows if w["failed"]]
    assert sum(w["failed"] for w in failed) == 2 and sum(w["retried"] for w in windows) == 2
    assert all(w["runtime_p50"] is not None for w in failed)
    reader = start_dashboard("--read-only")
    for board in (dashboard, reader):
        await page.goto(board.url + "/history?task=doomed")
        await expect(page.locator('[data-field="failed"]')).to_have_text("2")
        assert await page.locator('svg[data-chart="throughput"] rect.fail').count() >= 1
    await page.goto(reader.url + "/history?queue=default&span=24h")
    await expect(page.locator('[data-field="succeeded"]')).to_have_text("15")


async def test_a_bad_history_query_is_a_400_page(dashboard: Dashboard) -> None:
    for query in ("task=a..b", "queue=x.y", "span=7d", "queue=a&task=b"):
        reply = await dashboard.http.get(f"/history?{query}")
        assert reply.status == 400, (query, reply.status)
        api = await dashboard.http.get(f"/api/history?{query}")
        assert api.status == 400 and "error" in api.json()
