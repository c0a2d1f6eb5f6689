"""The dashboard in a real browser (headless Chromium) against a real nats-server, a real
worker and `taskq dashboard` as a user starts it: every action the dashboard offers, done by
clicking, and checked on the server. The screenshots in docs/dashboard.md come from here."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest
from playwright.async_api import Locator, Page, expect

import taskq
from taskq import App
from taskq.operate.queue_stats import queue_stats
from taskq.records.results import fetch
from tests.conftest import run_cli, running_worker, wait_until
from tests.dashboard.conftest import Dashboard, shoot

SCRIPT = "<script>window.__pwned = 1</script><img src=x onerror=window.__pwned=2>"


def waiting_cell(page: Page, queue: str) -> Locator:
    return page.locator(f'tr[data-queue="{queue}"] [data-field="waiting"]')


@pytest.mark.heavy
async def test_overview_shows_the_waiting_count_change_live(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    @app.task(queue="mail")
    async def send(n: int) -> int:
        await asyncio.sleep(0.05)
        return n

    await send.enqueue(0)
    await page.goto(dashboard.url + "/")
    await page.evaluate("window.__same_page = true")  # gone if the page were reloaded
    cell = waiting_cell(page, "mail")
    await expect(cell).to_have_text("1")
    # Given the page stays open, when tasks are enqueued, the count changes without a reload
    for n in range(1, 5):
        await send.enqueue(n)
    await expect(cell).to_have_text("5", timeout=10_000)
    await expect(page.locator("#live")).to_have_text("live")
    async with running_worker(app, concurrency=2):
        await expect(page.locator("tr[data-worker]")).to_have_count(1, timeout=10_000)
        for n in range(40):  # a little traffic for the rates and the sparkline
            await send.enqueue(n)
            await asyncio.sleep(0.1)  # spread over a few seconds: the rates' samples
        await expect(cell).to_have_text("0", timeout=15_000)
        # the worker's row follows its heartbeats (every 5 s) on the same page
        done = page.locator('tr[data-worker] [data-field="succeeded"]')
        await expect(done).not_to_have_text("0", timeout=15_000)
        spark = page.locator('svg[data-spark="mail"]')
        await wait_until(lambda: _points(spark), timeout=10)
        await shoot(page, "overview")
    assert await page.evaluate("window.__same_page") is True


async def _points(spark: Locator) -> bool:
    return int(await spark.get_attribute("data-points") or 0) >= 2


async def test_requeue_from_the_dead_letter_page_runs_the_task(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    ran: list[str] = []

    @app.task(max_retries=0)
    async def charge(order: str) -> str:
        ran.append(order)
        if len(ran) == 1:
            raise ConnectionError(f"payment gateway down for {order}")
        return f"charged {order}"

    async with running_worker(app) as worker:
        handle = await charge.enqueue("A-1001")
        await wait_until(lambda: worker.stats["dead"] == 1)
        await page.goto(dashboard.url + "/dlq")
        row = page.locator("table.dead tbody tr", has_text="A-1001")
        await expect(row).to_contain_text("ConnectionError: payment gateway down for A-1001")
        await shoot(page, "dlq")
        await row.get_by_role("button", name="Requeue").click()
        await expect(page.locator(".notice")).to_have_text("Requeued 1 dead letter(s).")
        await wait_until(lambda: worker.stats["succeeded"] == 1)
    record = await fetch(app, handle.id)
    assert record is not None and record.state == "succeeded"
    assert record.result == "charged A-1001" and ran == ["A-1001", "A-1001"]
    await expect(page.locator("table.dead")).to_have_count(0)  # the DLQ is empty now


async def test_cancel_from_the_task_page_stops_a_running_task(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    @app.task(timeout=120)
    async def crunch(steps: int) -> str:
        ctx = taskq.current()
        for i in range(1, steps + 1):
            ctx.progress(i / steps, f"step {i} of {steps}")
            await asyncio.sleep(0.1)
        return "finished"

    async with running_worker(app) as worker:
        handle = await crunch.enqueue(600)  # a minute, unless cancelled
        await wait_until(lambda: handle.progress(), timeout=10)
        await page.goto(dashboard.url + f"/tasks/{handle.id}")
        bar = page.locator("progress#progress")
        first = float(await bar.get_attribute("value") or 0)
        # the bar moves while the page stays open (server-sent events)
        await wait_until(lambda: _grew(page, first), timeout=10)
        await expect(page.locator('[data-live="state"]')).to_have_text("running", timeout=10_000)
        await shoot(page, "task")
        await page.get_by_role("button", name="Cancel task").click()
        await expect(page.locator('[data-live="state"]')).to_have_text("cancelled")
        # stopped, not finished: uncancelled, the task runs a minute (the deadline only
        # catches that, not a slow machine)
        await wait_until(lambda: worker.stats["cancelled"] == 1, timeout=30)
    record = await fetch(app, handle.id)
    assert record is not None and record.state == "cancelled"


async def _grew(page: Page, before: float) -> bool:
    value = await page.evaluate("document.getElementById('progress').value")
    return float(value) > before


async def test_pause_purge_and_resume_from_the_queue_page(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    ran: list[int] = []

    @app.task(queue="mail")
    async def send(n: int) -> None:
        ran.append(n)

    @app.task(queue="mail")
    async def promo(n: int) -> None:
        ran.append(-n)

    async with running_worker(app) as worker:
        await send.enqueue(1)
        await wait_until(lambda: ran == [1])
        await page.goto(dashboard.url + "/queues/mail")
        await page.get_by_role("button", name="Pause queue").click()
        await expect(page.locator(".notice")).to_contain_text("Queue paused")
        await expect(page.locator('[data-field="paused"]')).to_have_text("paused until resumed")
        assert (await queue_stats(app, "mail")).paused
        await send.enqueue(2)
        for n in (1, 2, 3):
            await promo.enqueue(n)
        await expect(page.locator('dd[data-field="waiting"]')).to_have_text("4", timeout=10_000)
        # paused: nothing a new worker could start (the autoscaling signal stays at 0)
        await expect(page.locator('dd[data-field="runnable"]')).to_have_text("0")
        assert ran == [1]  # paused: nothing more ran
        await page.reload()
        await shoot(page, "queue")
        # purge one task's messages, confirmed on the next page
        row = page.locator("table.narrow tbody tr", has_text="promo")
        await row.get_by_role("button", name="Purge…").click()
        await expect(page.locator(".question")).to_have_text(
            "Remove the 3 stored task(s) of task promo of queue mail?"
        )
        await page.get_by_role("button", name="Yes, do it").click()
        await expect(page.locator(".notice")).to_have_text(
            "Removed 3 stored task(s) from the queue."
        )
        await page.get_by_role("button", name="Resume queue").click()
        await expect(page.locator(".notice")).to_have_text("Queue resumed.")
        await wait_until(lambda: ran == [1, 2], timeout=10)
        await asyncio.sleep(0.3)  # a negative: room for a purged task to (wrongly) run
        assert ran == [1, 2] and worker.stats["succeeded"] == 2
    assert not (await queue_stats(app, "mail")).paused


async def test_a_task_s_attempts_read_apart_in_milliseconds(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    """Attempts a fraction of a second apart: each with its millisecond times, what it
    took, and the delay before the next (the retry's backoff, 0.25 s)."""

    @app.task(max_retries=2, backoff=0.25, jitter=0)
    async def shaky() -> str:
        if taskq.current().attempt < 3:
            raise RuntimeError("not yet")
        return "done"

    async with running_worker(app):
        handle = await shaky.enqueue()
        assert await handle.result(timeout=30) == "done"
    await page.goto(dashboard.url + f"/tasks/{handle.id}")
    rows = page.locator("table.narrow tbody tr")
    await expect(rows).to_have_count(3)
    await expect(rows.nth(0).locator("time").first).to_have_text(MILLIS)
    for n in range(3):
        await expect(rows.nth(n).locator('[data-field="took"]')).to_have_text(SECONDS)
    gaps = [await rows.nth(n).locator('[data-field="next-after"]').inner_text() for n in (0, 1)]
    assert all(float(gap.split()[0]) >= 0.25 for gap in gaps), gaps
    await expect(rows.nth(2).locator('[data-field="next-after"]')).to_have_text("-")


MILLIS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z$")
SECONDS = re.compile(r"^\d+\.\d{3} s$")


async def test_a_script_argument_is_inert(app: App, dashboard: Dashboard, page: Page) -> None:
    @app.task(max_retries=0)
    async def render(html: str) -> None:
        raise ValueError(f"cannot render {html}")

    async with running_worker(app) as worker:
        dead = await render.enqueue(SCRIPT)
        await wait_until(lambda: worker.stats["dead"] == 1)
    waiting = await render.enqueue(SCRIPT)  # no worker now: it waits
    pages = ["/", f"/tasks/{dead.id}", f"/tasks/{waiting.id}", "/dlq", "/dlq/1", "/queues/default"]
    for path in pages:
        await page.goto(dashboard.url + path)
        assert await page.evaluate("window.__pwned") is None, path
        assert await page.locator("script:not([src])").count() == 0, path
    await page.goto(dashboard.url + f"/tasks/{dead.id}")
    await expect(page.locator("pre.args")).to_contain_text(SCRIPT)  # shown as text
    await expect(page.locator("pre.traceback")).to_contain_text(f"cannot render {SCRIPT}")
    html = (await dashboard.http.get(f"/tasks/{dead.id}")).body
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html
    assert SCRIPT not in html


async def test_the_token_is_required_off_loopback(
    start_dashboard: Callable[..., Dashboard], nats_url: str, prefix: str, page: Page
) -> None:
    refused = await asyncio.to_thread(run_cli, nats_url, prefix, "dashboard", "--host", "0.0.0.0")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "taskq dashboard: refusing to listen on 0.0.0.0 without a token: anyone who reaches "
        "it could act on your queues; pass --token (or set TASKQ_DASHBOARD_TOKEN), or keep "
        "--host 127.0.0.1"
    ]
    token = "s3cret-dashboard-token"
    board = start_dashboard("--host", "0.0.0.0", env={"TASKQ_DASHBOARD_TOKEN": token})
    assert (await board.http.get("/")).status == 401
    assert (await board.http.get("/api/")).status == 401
    assert (await board.http.get("/api/", authorization=f"Bearer {token}")).status == 200
    assert (await board.http.get("/api/", authorization="Bearer wrong")).status == 401
    await page.goto(board.url + "/dlq")
    await expect(page.locator("h1")).to_have_text("Sign in")
    await page.fill("#token", "not-it")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator(".problem")).to_have_text("That token is not right.")
    await page.fill("#token", token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("h1")).to_have_text("Dead letters")  # back where it was going
    assert token not in await page.content()
    cookies = {c["name"]: c["value"] for c in await page.context.cookies()}
    assert token not in cookies.values() and cookies["taskq_auth"]
