"""The remaining pages in the browser: schedules (next run, remove), a workflow's steps,
the workers, a dead letter's filters and its bulk purge, and the keyboard shortcuts."""

from __future__ import annotations

import asyncio
import re

from playwright.async_api import Page, expect

from taskq import App, chain, group
from taskq.dlq.browse import list_dead
from taskq.operate.queue_stats import queue_stats
from tests.conftest import running_worker, wait_until
from tests.dashboard.conftest import Dashboard, shoot


async def test_schedules_workflows_workers_and_the_keyboard(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    release = asyncio.Event()

    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    @app.task
    async def hold(value: int) -> int:
        await release.wait()
        return value

    @app.periodic(cron="0 0 3 * * *")
    async def nightly() -> None: ...

    async with running_worker(app, concurrency=4):
        later = await add.options(countdown=600).enqueue(2, 2)
        flow = await chain(add.s(1, 2), hold.s(), add.s(100)).enqueue()
        members = await group(add.s(1, 1), add.s(2, 2), add.s(3, 3)).enqueue()
        assert await members.result(timeout=10) == [2, 4, 6]
        await page.goto(dashboard.url + "/schedules")
        rows = page.locator("table.schedules tbody tr")
        await expect(rows).to_have_count(2)
        await expect(rows.filter(has_text="periodic.nightly")).to_contain_text("03:00:00.000Z")
        await shoot(page, "schedules")
        await rows.filter(has_text=later.id).get_by_role("button", name="Remove…").click()
        await expect(page.locator(".question")).to_contain_text(later.id)
        await page.get_by_role("button", name="Yes, do it").click()
        await expect(page.locator(".notice")).to_have_text("Schedule removed.")
        await expect(rows).to_have_count(1)

        # the chain: a step done, one running (held), one not enqueued yet
        flow_id = flow.id.rsplit(".", 1)[0]
        await page.goto(dashboard.url + f"/workflows/{flow.id}")  # the final task's id works
        await expect(page.locator("h1")).to_contain_text(f"Chain {flow_id}")
        states = page.locator("table.steps tbody tr td:last-child")
        # the held step is `queued` until a worker heartbeat lists it, `running` after
        held = re.compile(r"^(queued|running)$")
        await expect(states).to_have_text(["succeeded", held, "pending"])
        await shoot(page, "workflow")
        release.set()
        assert await flow.result(timeout=10) == 103
        await page.reload()
        await expect(states).to_have_text(["succeeded"] * 3)

        # keyboard: `/` then a group's id goes to its page; `g w` to the workers
        await page.goto(dashboard.url + "/")
        await page.keyboard.press("/")
        await page.keyboard.type(members.id)
        await page.keyboard.press("Enter")
        await expect(page.locator("h1")).to_contain_text(f"Group {members.id}")
        await expect(page.locator("table.steps tbody tr")).to_have_count(3)
        # the keys are read by a deferred script: pressed before it ran, they would be lost
        await page.wait_for_load_state("load")
        await page.keyboard.press("g")
        await page.keyboard.press("w")
        await expect(page.locator("h1")).to_have_text("Workers")
        await expect(page.locator("tr[data-worker]")).to_have_count(1)
        await shoot(page, "workers")


async def test_dead_letters_filtered_and_purged_after_confirmation(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    @app.task(max_retries=0)
    async def charge(order: int) -> None:
        raise ValueError(f"card declined for order {order}")

    @app.task(max_retries=0)
    async def ship(order: int) -> None:
        raise KeyError(f"no address for order {order}")

    async with running_worker(app) as worker:
        for n in range(6):
            await charge.enqueue(n)
            await ship.enqueue(n)
        await wait_until(lambda: worker.stats["dead"] == 12)
    await page.goto(dashboard.url + "/dlq")
    await expect(page.locator(".count")).to_have_text("12 dead letter(s).")
    await page.fill('input[name="q"]', "card declined")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("table.dead tbody tr")).to_have_count(6)
    await expect(page.locator(".count")).to_contain_text("Showing 6 match(es)")
    await page.get_by_role("button", name="Purge matching…").click()
    await expect(page.locator(".question")).to_have_text(
        "Delete the 6 dead letter(s) with error containing “card declined” for good?"
    )
    await page.get_by_role("button", name="Yes, do it").click()
    await expect(page.locator(".notice")).to_have_text("Deleted 6 dead letter(s).")
    left = await list_dead(app)
    assert len(left) == 6 and {r.task for r in left} == {"ship"}
    # and requeue all matching, as a script would (the page's form does the same POST)
    ask = await dashboard.http.post("/api/dlq/requeue", {"task": "ship"})
    assert ask.status == 409 and ask.json()["count"] == 6
    done = await dashboard.http.post("/api/dlq/requeue", {"task": "ship", "confirm": "yes"})
    assert done.json() == {"requeued": 6, "failed": []}
    assert await list_dead(app) == [] and (await queue_stats(app, "default")).waiting == 6
