"""The dashboard shows everything (issue 27): held tasks and the limit holding them, a
traceback led by the exception and the user's own frames (taskq's folded), a failed chain's
final step under its own name, the two dead figures told apart, and a requeue-all that says
which filters it applies. In a real browser, against a real worker."""

from __future__ import annotations

import re

from playwright.async_api import Page, expect

from taskq import App, TaskFailed, chain
from taskq.dlq.browse import list_dead
from tests.conftest import running_worker, wait_until
from tests.dashboard.conftest import Dashboard, shoot


def declined(order: int) -> None:
    """The user's own frame the traceback must lead with."""
    raise ValueError(f"card declined for order {order}")


async def test_held_tasks_show_on_the_overview_queue_and_task_pages(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    @app.task(rate_limit="2/h")  # two run, the rest are held for the hour
    async def notify(n: int) -> None: ...

    async with running_worker(app, concurrency=4) as worker:
        await page.goto(dashboard.url + "/")
        held = page.locator('tr[data-queue="default"] [data-field="held"]')
        await expect(held).to_have_text("0")
        handles = [await notify.enqueue(n) for n in range(30)]
        # two start now, unless a start slipped on a loaded machine: that one is held too
        # (with a fresh reservation), never run late into the next window
        await wait_until(lambda: worker.stats["held"] + worker.stats["succeeded"] >= 30, 30)
        n = 30 - worker.stats["succeeded"]
        assert n >= 28
        figures = (await dashboard.http.api("/queues/default"))["queue"]
        assert figures["held"] == n and figures["held_by"] == {"rate_limit notify": n}
        assert figures["waiting"] == 0 and figures["in_flight"] == 0
        # the overview's row follows, live (the page was opened before any was held)
        await expect(held).to_have_text(str(n), timeout=15_000)
        await expect(held).to_have_attribute("title", f"rate_limit notify: {n}")
        # the queue page: how many, and by which limit
        await page.goto(dashboard.url + "/queues/default")
        await expect(page.locator('dd[data-field="held"]')).to_have_text(str(n))
        await expect(page.locator('[data-field="held_by"] li')).to_have_text(
            [f"rate_limit notify: {n}"]
        )
        # a held task's page says it is held, by what, and until when
        for handle in handles:
            story = await dashboard.http.api(f"/tasks/{handle.id}")
            if story["state"] == "held":
                break
        else:
            raise AssertionError("no task is held")
        await page.goto(dashboard.url + f"/tasks/{handle.id}")
        await expect(page.locator('[data-live="state"]')).to_have_text("held")
        status = page.locator("p.status")
        await expect(status).to_contain_text(f"held by {story['held_by']}")
        await expect(status).to_contain_text("no attempt spent")


async def test_tracebacks_lead_with_the_exception_and_the_users_frames(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    @app.task(max_retries=0)
    async def charge(order: int) -> None:
        declined(order)

    async with running_worker(app) as worker:
        handle = await charge.enqueue(42)
        await wait_until(lambda: worker.stats["dead"] == 1)
    (letter,) = await list_dead(app)
    for path in (f"/tasks/{handle.id}", f"/dlq/{letter.seq}"):
        await page.goto(dashboard.url + path)
        error = page.locator("p.error").first
        await expect(error).to_contain_text("ValueError: card declined for order 42")
        shown = page.locator("pre.traceback").first
        text = await shown.inner_text()
        lines = text.splitlines()
        # the user's frames first (the caller, then the helper that raised), then the line
        assert lines[0].startswith('  File "') and "test_visibility.py" in lines[0], text
        assert "in charge" in lines[0] and "in declined" in text, text
        assert lines[-1] == "ValueError: card declined for order 42", text
        assert "execute.py" not in text and "middleware.py" not in text, text
        # taskq's own frames are folded, and there on a click
        folded = page.locator("details.taskq-frames").first
        await expect(folded.locator("summary")).to_have_text(
            re.compile(r"^\d+ taskq frames \(execute, telemetry\)$")
        )
        await expect(folded).not_to_have_attribute("open", "")
        inner = folded.locator("pre")
        await expect(inner).not_to_be_visible()
        if path.startswith("/dlq"):
            await shoot(page, "dead-letter")
        await folded.locator("summary").click()
        await expect(inner).to_be_visible()
        await expect(inner).to_contain_text("workers/execute.py")
        await expect(inner).to_contain_text("taskq/telemetry.py")


async def test_a_failed_chains_final_step_keeps_its_own_name(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    @app.task(max_retries=0)
    async def explode(n: int) -> int:
        raise ValueError(f"exploded on {n}")

    @app.task
    async def double(n: int) -> int:
        return 2 * n

    @app.task
    async def publish(n: int, channel: str) -> str:
        return f"{n} to {channel}"

    async with running_worker(app):
        flow = await chain(explode.s(7), double.s(), publish.s(channel="news")).enqueue()
        try:
            await flow.result(timeout=15)
        except TaskFailed as exc:
            assert "exploded on 7" in str(exc)
        else:
            raise AssertionError("the chain succeeded")
    flow_id = flow.id.rsplit(".", 1)[0]
    final = f"{flow_id}.2"
    assert flow.id == final
    story = await dashboard.http.api(f"/tasks/{final}")
    assert (story["task"], story["queue"], story["state"]) == ("publish", "default", "dead")
    assert (story["args"], story["kwargs"]) == ([], {"channel": "news"})
    assert story["failed_step"] == f"{flow_id}.0" and story["attempts"] == []
    assert story["error"]["type"] == "ValueError"  # the failing step's error, as waiters get
    await page.goto(dashboard.url + f"/tasks/{final}")
    await expect(page.locator("h1")).to_contain_text("publish")
    await expect(page.locator("h1")).not_to_contain_text("explode")
    await expect(page.locator("pre.args")).to_have_text(["[]", '{"channel": "news"}'])
    cause = page.locator("p.failed-step")
    await expect(cause).to_contain_text(
        f"never ran: step {flow_id}.0 (explode) of its workflow failed"
    )
    await cause.get_by_role("link", name=f"{flow_id}.0").click()
    await expect(page.locator("h1")).to_contain_text("explode")
    await page.goto(dashboard.url + f"/workflows/{flow_id}")
    rows = page.locator("table.steps tbody tr")
    await expect(rows.filter(has_text=final).locator("th")).to_have_text("publish")
    await expect(rows.filter(has_text=f"{flow_id}.0").locator("th")).to_have_text("explode")


async def test_the_dead_figures_are_told_apart_and_requeue_all_names_its_filters(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    @app.task(max_retries=0)
    async def charge(order: int) -> None:
        declined(order)

    @app.task(max_retries=0)
    async def ship(order: int) -> None:
        raise KeyError(f"no address for order {order}")

    async with running_worker(app) as worker:
        for n in range(3):
            await charge.enqueue(n)
            await ship.enqueue(n)
        await wait_until(lambda: worker.stats["dead"] == 6)
        await page.goto(dashboard.url + "/")
        queues_dead = page.locator("table.queues thead th").nth(6)
        workers_dead = page.locator("table.workers thead th").nth(7)
        await expect(queues_dead).to_have_text("In DLQ")
        await expect(workers_dead).to_have_text("Sent to DLQ")
        assert "now" in (await queues_dead.get_attribute("title") or "")
        assert "since it started" in (await workers_dead.get_attribute("title") or "")
        await expect(page.locator('tr[data-queue="default"] [data-field="dead"]')).to_have_text("6")
        # a worker's counts come with its heartbeats (every 5 s)
        await expect(page.locator('tr[data-worker] [data-field="dead"]')).to_have_text(
            "6", timeout=15_000
        )
    await page.goto(dashboard.url + "/dlq?task=ship&reason=exhausted&since=1h")
    await page.get_by_role("button", name="Requeue all matching…").click()
    await expect(page.locator(".question")).to_have_text(
        "Requeue the 3 dead letter(s) with task ship, reason exhausted, failed within 1h?"
    )
    yes = page.get_by_role("button", name="Yes, do it")
    assert "danger" not in (await yes.get_attribute("class") or "")
    await yes.click()
    await expect(page.locator(".notice")).to_have_text("Requeued 3 dead letter(s).")
    # the purge's confirmation stays a destructive one
    await page.goto(dashboard.url + "/dlq")
    await page.get_by_role("button", name="Purge matching…").click()
    await expect(page.locator(".question")).to_have_text("Delete ALL 3 dead letter(s) for good?")
    assert "danger" in (await yes.get_attribute("class") or "")
