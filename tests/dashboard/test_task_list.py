"""The dashboard's task list (`/tasks`, issue 27): recent tasks newest first, filtered by
task name, queue, state and id prefix, paged, in a real browser; its JSON twin equals the
CLI's; and (slow) a page with 100,000 records, measured."""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import pytest
from playwright.async_api import Page, expect

from taskq import App
from taskq.operate.task_list import TaskFilters, recent
from tests.conftest import run_cli, running_worker, wait_until
from tests.dashboard.conftest import Dashboard, shoot
from tests.stored import write_records


async def test_the_task_list_filters_pages_and_searches(
    app: App, dashboard: Dashboard, page: Page, nats_url: str, prefix: str
) -> None:
    @app.task(queue="mail")
    async def send(n: int) -> int:
        return n

    @app.task(max_retries=0)
    async def boom(n: int) -> None:
        raise ValueError(f"boom {n}")

    await write_records(app, 60)  # older records: pages of them
    async with running_worker(app) as worker:
        sent = [await send.enqueue(n) for n in range(3)]
        for handle in sent:
            await handle.result(timeout=10)
        dead = await boom.enqueue(9)
        await wait_until(lambda: worker.stats["dead"] == 1)
    await page.goto(dashboard.url + "/")
    await page.keyboard.press("g")
    await page.keyboard.press("t")
    await expect(page.locator("h1")).to_have_text("Tasks")
    rows = page.locator("table.tasks tbody tr")
    await expect(rows).to_have_count(50)
    await shoot(page, "tasks")
    await expect(rows.first).to_contain_text(dead.id)
    await expect(rows.first).to_contain_text("ValueError: boom 9")
    # filter by name and state: the dead one only
    await page.fill('input[name="name"]', "boom")
    await page.select_option('select[name="state"]', "dead")
    await page.get_by_role("button", name="Filter").click()
    await expect(rows).to_have_count(1)
    await expect(rows.first.locator("td.state-cell")).to_have_text("dead")
    # by queue: the mail tasks, newest first
    await page.goto(dashboard.url + "/tasks?queue=mail")
    await expect(rows.locator("td.id")).to_have_text([h.id for h in reversed(sent)])
    # by the start of an id
    await page.goto(dashboard.url + "/tasks")
    await page.fill('form.filters input[name="id"]', "id00002")
    await page.get_by_role("button", name="Filter").click()
    await expect(rows.locator("td.id")).to_have_text([f"id00002{n}" for n in range(9, -1, -1)])
    # pages: older, then newer again
    await page.goto(dashboard.url + "/tasks")
    await page.get_by_role("link", name="Older").click()
    await expect(rows).to_have_count(14)
    await expect(rows.last.locator("td.id")).to_have_text("id000000")
    await page.get_by_role("link", name="Newer").click()
    await expect(rows).to_have_count(50)
    await expect(rows.first).to_contain_text(dead.id)
    # a row leads to the task's page
    await rows.first.get_by_role("link", name=dead.id).click()
    await expect(page.locator("h1")).to_contain_text("boom")
    # an id nothing knows offers the search by prefix
    await page.goto(dashboard.url + "/tasks/id00001")
    await page.get_by_role("link", name="tasks whose id starts with id00001").click()
    await expect(rows).to_have_count(10)
    # the JSON twin is the page, and its tasks are the CLI's
    api = await dashboard.http.api("/tasks?queue=mail")
    assert api == (await recent(app, TaskFilters(queue="mail"))).to_dict()
    cli = await asyncio.to_thread(
        run_cli, nats_url, prefix, "tasks", "ls", "--queue", "mail", "--json"
    )
    assert api["tasks"] == json.loads(cli.stdout)
    bad = await dashboard.http.get("/api/tasks?state=sleeping")
    assert bad.status == 400 and "state must be one of" in bad.json()["error"]


@pytest.mark.slow
async def test_a_page_of_tasks_with_100000_records(app: App, dashboard: Dashboard) -> None:
    """`pytest -m slow -n 0 -s tests/dashboard/test_task_list.py`: prints the figures of
    docs/dashboard.md (no wall-clock assertion)."""
    started = time.perf_counter()
    for start in range(0, 100_000, 10_000):
        await write_records(app, 10_000, start)
    print(f"\nwrote 100,000 records in {time.perf_counter() - started:.1f} s")
    timings = {}
    for name, path in (
        ("/tasks first page (HTML)", "/tasks"),
        ("/api/tasks first page (JSON)", "/api/tasks"),
        ("/tasks?state=dead (1 in 4)", "/tasks?state=dead"),
        ("/tasks?name=t1&queue=q1 (1 in 6)", "/tasks?name=t1&queue=q1"),
        ("/tasks?id=id09999 (the newest 10)", "/tasks?id=id09999"),
        ("/tasks?id=id00000 (the oldest: the budget read)", "/tasks?id=id00000"),
        ("/tasks?before=50000 (a deep page)", "/tasks?before=50000"),
    ):
        timings[name] = await _median_seconds(dashboard, path)
    for name, took in timings.items():
        print(f"{name}: {took * 1000:.0f} ms")
    first = await dashboard.http.api("/tasks")
    assert [t["id"] for t in first["tasks"]] == [f"id{n:06d}" for n in range(99_999, 99_949, -1)]


async def _median_seconds(dashboard: Dashboard, path: str) -> float:
    took = []
    for _ in range(3):
        started = time.perf_counter()
        reply = await dashboard.http.get(path)
        took.append(time.perf_counter() - started)
        assert reply.status == 200, (path, reply.body[:300])
    return statistics.median(took)
