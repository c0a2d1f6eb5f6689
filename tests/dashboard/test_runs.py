"""Durable workflow runs in the dashboard (issue 29): `/workflows` lists runs by state and
name, paged by sequence cursors; `/workflows/<id>` shows a run's steps as a timeline with
its timers and signals, live, and signals, cancels and retries it through CSRF-checked
forms; its JSON twins equal `taskq workflows ls/show --json`; unknown and hostile ids are
a 404, a bad payload a 400, a NATS user's refusal a 403. A real Chromium opens the list,
then a waiting run, sends its signal with the button and sees the run finish live."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any
from urllib.parse import quote

from playwright.async_api import Page, expect

from taskq import App, Workflow
from taskq.server import EmbeddedServer
from taskq.workflows import store
from taskq.workflows.run_lists import collect_runs, runs_page
from taskq.workflows.views import show_run
from tests.conftest import cli, running_worker, wait_until
from tests.dashboard.conftest import Dashboard, shoot
from tests.roles import role, role_env

MILLIS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z$")
TOOK = re.compile(r"^(\d+\.\d{3} s|\d+m\d\ds)$")
HOSTILE = (
    "../../etc/passwd",
    "<script>alert(1)</script>",
    "a*>.b",
    "h.deadbeef",
    "x" * 5000,
    "line\nbreak",
    "nul\x00byte",
    "$KV.x.>",
)


def declare(app: App) -> tuple[Any, Any]:
    """An order that charges, then waits for approval; a workflow whose step always fails."""

    @app.task
    async def charge(order_id: str, cents: int) -> str:
        return f"receipt-{order_id}-{cents}"

    @app.task(max_retries=0)
    async def explode(order_id: str) -> None:
        raise ValueError(f"no stock for {order_id}")

    @app.workflow
    async def order(wf: Workflow, order_id: str, cents: int) -> dict[str, Any]:
        receipt = await wf.run(charge, order_id, cents)
        approval = await wf.wait_for("approved", timeout=3600)
        return {"receipt": receipt, "approval": approval}

    @app.workflow
    async def broken(wf: Workflow, order_id: str) -> None:
        await wf.run(explode, order_id)

    return order, broken


async def in_state(app: App, run_id: str, state: str) -> None:
    run = app.workflow_run(run_id)

    async def there() -> bool:
        return await run.status() == state

    await wait_until(there, timeout=20)


async def test_runs_listed_shown_and_acted_on_over_http(app: App, dashboard: Dashboard) -> None:
    order, broken = declare(app)
    http = dashboard.http
    assert (await http.api("/workflows"))["runs"] == []  # no runs bucket yet: none
    # unknown and hostile ids: a 404 (never a 500), shown escaped, for pages and actions
    missing = await http.get("/api/workflows/no-such-run")
    assert missing.status == 404 and "no workflow 'no-such-run'" in missing.json()["error"]
    for ref in HOSTILE:
        path = "/workflows/" + quote(ref, safe="")
        reply = await http.get(path)
        assert reply.status == 404, (ref, reply.status, reply.body[:300])
        assert "<script>alert" not in reply.body
        for action in ("signal", "cancel", "retry"):
            reply = await http.post(f"{path}/{action}", {"name": "x", "confirm": "yes"})
            assert reply.status == 404, (ref, action, reply.status, reply.body[:300])
    async with running_worker(app, concurrency=4):
        for key in ("o-1", "o-2"):
            await order.options(key=key).start(key, 100)
        await broken.options(key="b-1").start("b-1")
        await in_state(app, "o-1", "waiting")
        await in_state(app, "o-2", "waiting")
        await in_state(app, "b-1", "dead")

        # the list, filtered; the JSON twins are the CLI's
        listed = await http.api("/workflows")
        assert {r["id"] for r in listed["runs"]} == {"o-1", "o-2", "b-1"}
        assert listed["older"] is None and listed["scanned"] == 3
        waiting = await http.api("/workflows?state=waiting")
        assert sorted(r["id"] for r in waiting["runs"]) == ["o-1", "o-2"]
        assert [r["id"] for r in (await http.api("/workflows?name=broken"))["runs"]] == ["b-1"]
        assert (await http.api("/workflows?name=order&state=dead"))["runs"] == []
        # what `taskq workflows ls --json` and `show ID --json` print (a subprocess each
        # would cost seconds here; tests/workflows/test_cli.py runs the commands)
        client = await app.client()
        ls = json.dumps([r.to_dict() for r in (await collect_runs(client))[0]], indent=2)
        assert json.loads(ls) == listed["runs"]
        run = await http.api("/workflows/o-1")
        shown = json.dumps((await show_run(client, "o-1")).to_dict(), indent=2, default=repr)
        assert run == json.loads(shown)
        assert [(s["kind"], s["target"], s["state"]) for s in run["steps"]] == [
            ("run", "charge", "succeeded"),
            ("wait", "approved", "pending"),
        ]
        assert run["steps"][0]["started_at"] and run["steps"][0]["ended_at"]
        assert run["steps"][1]["until"]  # the wait's timeout: a timer
        for bad, says in (("state=bogus", "a run's state is one of"), ("name=a+b", "a b")):
            reply = await http.get(f"/api/workflows?{bad}")
            assert reply.status == 400 and says in reply.json()["error"], reply.body
        html = (await http.get("/workflows?state=waiting")).body
        assert 'href="/workflows/o-1"' in html and "b-1" not in html
        page = (await http.get("/workflows/o-1")).body
        assert page.count('<li data-step="') == 2 and "Send signal" in page
        assert "Cancel run…" in page and "Retry run…" not in page
        assert "Retry run…" in (await http.get("/workflows/b-1")).body
        # a step's id leads to its run; the search box finds a run
        step = await http.get("/workflows/o-1.0")
        assert step.status == 303 and step.headers["location"] == "/workflows/o-1"
        go = await http.get("/go?id=o-1")
        assert go.status == 303 and go.headers["location"] == "/workflows/o-1"

        # signal: refused without the CSRF token, a bad payload or no name is a 400
        stolen = await http.post("/workflows/o-1/signal", {"csrf": "", "name": "approved"})
        assert stolen.status == 403
        bad = await http.post("/workflows/o-1/signal", {"name": "approved", "payload": "{by"})
        assert bad.status == 400 and "the payload is not JSON" in bad.body
        nameless = await http.post("/api/workflows/o-1/signal", {"payload": "1"})
        assert nameless.status == 400 and "signal's name" in nameless.json()["error"]
        assert (await show_run(await app.client(), "o-1")).signals == []
        sent = await http.post(
            "/workflows/o-1/signal", {"name": "approved", "payload": '{"by": "ann"}'}
        )
        assert sent.status == 303, sent.body
        assert sent.headers["location"] == "/workflows/o-1?notice=signalled"
        result = await app.workflow_run("o-1").result(timeout=20)
        assert result == {"receipt": "receipt-o-1-100", "approval": {"by": "ann"}}
        late = await http.post("/api/workflows/o-1/signal", {"name": "approved"})
        assert late.status == 409 and "already ended succeeded" in late.json()["error"]
        # the live stream of a run that ended: its final state, and the stream ends
        events = await http.get("/events/workflows/o-1?state=waiting&last=1")
        assert "event: run" in events.body and '"final": true' in events.body

        # cancel: asked first (a page for people, 409 for scripts), then done
        asked = await http.post("/workflows/o-2/cancel")
        assert asked.status == 200 and "Cancel run o-2 of order?" in asked.body
        assert (await http.post("/api/workflows/o-2/cancel")).status == 409
        cancelled = await http.post("/api/workflows/o-2/cancel", {"confirm": "yes"})
        assert cancelled.json() == {"id": "o-2", "cancel": True}
        await in_state(app, "o-2", "cancelled")

        # retry: only a failed run; confirmed, it resumes from its failed step
        refused = await http.post("/api/workflows/o-2/retry", {"confirm": "yes"})
        assert refused.status == 409 and "only a dead run" in refused.json()["error"]
        retried = await http.post("/workflows/b-1/retry", {"confirm": "yes"})
        assert retried.status == 303
        assert retried.headers["location"] == "/workflows/b-1?notice=run-retry"

        async def again() -> bool:
            view = await show_run(await app.client(), "b-1")
            return view.summary.state == "dead" and view.steps[0].id == "b-1.0r1"

        await wait_until(again, timeout=20)


async def test_pages_of_runs_show_every_run_once(app: App) -> None:
    client = await app.client()
    await store.ensure_workflows(client)
    for n in range(7):
        state = "failed" if n % 3 == 0 else "waiting"  # `failed`: an earlier taskq's `dead`

        def summary(_: store.RunSummary | None, n: int = n, state: str = state) -> Any:
            return store.RunSummary(id=f"r{n}", name="order", queue="default", state=state)

        await store.update_summary(client, f"r{n}", summary)
    seen: list[str] = []
    before = None
    while True:
        page = await runs_page(client, limit=2, before=before)
        seen += [r.summary.id for r in page.runs]
        if page.older is None:
            break
        before = page.older
    assert seen == [f"r{n}" for n in reversed(range(7))]
    failed = await runs_page(client, "failed", limit=2)
    assert [r.summary.id for r in failed.runs] == ["r6", "r3"] and failed.older is not None
    # a run that changes moves to the top: it is listed once, where it is now
    await store.update_summary(client, "r0", lambda s: s and s.model_copy(update={"state": "x"}))
    first = await runs_page(client, limit=3)
    assert [r.summary.id for r in first.runs] == ["r0", "r6", "r5"]
    rest = await runs_page(client, limit=10, before=first.older)
    assert [r.summary.id for r in rest.runs] == ["r4", "r3", "r2", "r1"] and rest.older is None


async def test_the_nats_user_s_permissions_are_the_dashboard_s_for_runs(
    secure_server: EmbeddedServer,
) -> None:
    """A producer may read a run's summary and signal or cancel it, but not resume a
    failed run: its dashboard says NATS refused it (403), and nothing changed."""
    operator = role(secure_server, "operator")
    client = await operator.client()
    await store.ensure_workflows(client)

    def failed(_: store.RunSummary | None) -> store.RunSummary:
        return store.RunSummary(id="dash-r1", name="dashroles", queue="default", state="failed")

    await store.update_summary(client, "dash-r1", failed)
    board = Dashboard(secure_server.url, "taskq", env=role_env("producer"))
    try:
        refused = await board.http.post("/workflows/dash-r1/retry", {"confirm": "yes"})
        assert refused.status == 403 and "NATS refused it" in refused.body
        summary = await store.load_summary(client, "dash-r1")
        assert summary is not None and summary.state == "dead"  # as written: `failed`
    finally:
        board.stop()
        await operator.aclose()


async def test_a_waiting_run_signalled_from_its_page_finishes_live(
    app: App, dashboard: Dashboard, page: Page
) -> None:
    release = asyncio.Event()

    @app.task
    async def ship(order_id: str) -> str:
        await release.wait()  # the run cannot finish before the page is watching it
        return f"shipped {order_id}"

    @app.workflow
    async def parcel(wf: Workflow, order_id: str) -> dict[str, Any]:
        approval = await wf.wait_for("approved")
        return {"approval": approval, "tracking": await wf.run(ship, order_id)}

    async with running_worker(app):
        await parcel.options(key="p-7").start("p-7")
        await in_state(app, "p-7", "waiting")
        await page.goto(dashboard.url + "/workflows")
        await expect(page.get_by_role("link", name="Workflows")).to_have_attribute(
            "aria-current", "page"
        )
        rows = page.locator("table.runs tbody tr")
        await expect(rows).to_have_count(1)
        await expect(rows.first.locator("td.state-cell")).to_have_text("waiting")
        await rows.first.get_by_role("link", name="p-7").click()
        await expect(page.locator("h1")).to_contain_text("Run parcel p-7")
        state = page.locator('[data-section="run-status"] .state')
        await expect(state).to_have_text("waiting")
        steps = page.locator("ol.timeline > li .what .state")
        await expect(steps).to_have_text(["pending"])
        await page.fill('form.signal input[name="name"]', "approved")
        await page.fill('form.signal textarea[name="payload"]', '{"by": "ann"}')
        await page.get_by_role("button", name="Send signal").click()
        await expect(page.locator(".notice")).to_contain_text("Signal sent")
        await page.evaluate("window.__same_page = true")  # gone if the page were reloaded
        # the page follows the run: the signal received, the next step running, then done
        await expect(page.locator("table.signals tbody tr")).to_contain_text("approved")
        # its step is pending until the worker's start mark for it is stored, then running
        # (on a loaded machine the page may first see it running)
        await expect(steps).to_have_text(["received", re.compile("pending|running")])
        await expect(state).to_have_text("running")
        await shoot(page, "run")
        release.set()
        await expect(state).to_have_text("succeeded")
        await expect(steps).to_have_text(["received", "succeeded"])
        await expect(page.locator("#live")).to_have_text("ended: succeeded")
        await expect(page.locator("form.signal")).to_have_count(0)
        assert await page.evaluate("window.__same_page") is True
        # what a Temporal UI user reads at the top: input, result, end and duration; each
        # step's time on the run's axis
        await page.reload()
        await expect(page.locator('[data-field="input"]')).to_contain_text('"p-7"')
        await expect(page.locator('[data-field="result"]')).to_contain_text("shipped p-7")
        await expect(page.locator('[data-field="ended"] time')).to_have_text(MILLIS)
        await expect(page.locator('[data-field="duration"]')).to_have_text(TOOK)
        shipped = page.locator('ol.timeline > li[data-step="1"]')
        await expect(shipped.locator("[data-step-took]")).to_have_text(re.compile(r"^took "))
        bar = shipped.locator("rect[data-step-bar]")
        x = int(await bar.get_attribute("x") or -1)
        width = int(await bar.get_attribute("width") or 0)
        # the step began after the run's start (it waited for the signal) and ran till its end
        assert 0 < x < 1000 and width > 0 and x + width <= 1000, (x, width)
    assert await app.workflow_run("p-7").result(timeout=5) == {
        "approval": {"by": "ann"},
        "tracking": "shipped p-7",
    }


async def test_a_chain_is_listed_beside_runs_and_opens_as_its_canvas(
    app: App, dashboard: Dashboard
) -> None:
    from taskq import Signature
    from taskq.workflows.canvas import chain

    @app.task
    async def add(x: int, y: int) -> int:
        return x + y

    handle = await chain(Signature(add, (1, 2)), Signature(add, (3,))).enqueue()
    flow = handle.id.split(".")[0]
    async with running_worker(app):
        assert await handle.result(timeout=20) == 6

        async def listed() -> bool:
            runs = (await dashboard.http.api("/workflows?name=chain"))["runs"]
            return [(r["id"], r["kind"], r["state"]) for r in runs] == [
                (flow, "chain", "succeeded")
            ]

        await wait_until(listed, timeout=20)
    html = (await dashboard.http.get("/workflows?name=chain")).body
    assert f'href="/workflows/{flow}"' in html
    page = await dashboard.http.get(f"/workflows/{flow}")
    assert page.status == 200 and "add" in page.body and "Cancel run…" not in page.body
    # a chain is no durable run: a run's actions do not apply to it
    refused = await dashboard.http.post(f"/api/workflows/{flow}/cancel", {"confirm": "yes"})
    assert refused.status == 404, refused.body


async def test_a_raw_start_with_no_time_in_its_at_breaks_no_page(
    app: App, dashboard: Dashboard, prefix: str, nats_url: str
) -> None:
    """Issue 38 (10): a run's times are the server's, never a field a producer wrote."""
    from taskq.ids import new_id
    from taskq.workflows.state import RunStepState
    from taskq.workflows.wake import Trigger, trigger

    order, _broken = declare(app)
    run_id = f"at-{new_id()}"
    start = {
        "e": "start",
        "workflow": order.name,
        "queue": "default",
        "args": ["o-at", 5],
        "kwargs": {},
        "at": "not a time",
    }
    client = await app.client()
    await store.ensure_workflows(client)
    await client.connection.publish(f"{prefix}.wf.{run_id}.s.0", json.dumps(start).encode())
    here = RunStepState(id=run_id, n=0, workflow=order.name, queue="default")
    await trigger(client, here, Trigger("0"))  # its first decision, as a producer sends it
    async with running_worker(app):
        run = app.workflow_run(run_id)
        await wait_until(lambda: _waiting(run), timeout=30)
        http = dashboard.http
        for path in ("/workflows", f"/workflows?name={order.name}", f"/workflows/{run_id}"):
            reply = await http.get(path)
            assert reply.status == 200, (path, reply.body[:300])
        listed = (await http.api("/workflows"))["runs"]
        mine = next(r for r in listed if r["id"] == run_id)
        assert mine["started_at"].startswith("20")  # the server's time
        shown = await cli(nats_url, prefix, "workflows", "show", run_id)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr


async def _waiting(run: Any) -> bool:
    return bool(await run.status() == "waiting")


async def test_child_runs_sit_under_their_parent_with_end_and_duration(
    app: App, dashboard: Dashboard
) -> None:
    """The runs list nests a child run right under its parent (both on the page), and says
    when each ended and how long it took."""

    @app.task
    async def pack(item: str) -> str:
        return f"packed {item}"

    @app.workflow
    async def box(wf: Workflow, item: str) -> str:
        return str(await wf.run(pack, item))

    @app.workflow
    async def order(wf: Workflow, item: str) -> str:
        return str(await wf.child(box, item))

    @app.workflow
    async def other(wf: Workflow) -> str:
        return "other"

    async with running_worker(app, concurrency=4):
        parent = await order.options(key="o-9").start("lamp")
        assert await parent.result(timeout=60) == "packed lamp"
        last = await other.options(key="x-1").start()  # changed after the child: listed above it
        assert await last.result(timeout=60) == "other"
    page = await dashboard.http.get("/workflows")
    rows = re.findall(r'<tr data-run="([^"]+)" data-depth="(\d)"', page.body)
    ids = [run for run, _ in rows]
    assert len(rows) == 3 and ids.index("o-9") + 1 == [d for _, d in rows].index("1"), rows
    assert dict(rows)["o-9"] == "0" and dict(rows)["x-1"] == "0"
    ended = re.findall(r'data-field="ended"><time', page.body)
    took = re.findall(r'data-field="duration">(\d+\.\d{3} s)<', page.body)
    assert len(ended) == len(took) == 3, (ended, took)


def test_runs_whose_parents_form_a_cycle_are_listed_all_the_same() -> None:
    """Hostile summaries naming each other as parents (or a chain deeper than the nesting
    goes) lose no run from the page: each is listed once."""
    from types import SimpleNamespace

    from taskq.dashboard.runs import _nested

    def run(run_id: str, parent: str | None) -> SimpleNamespace:
        return SimpleNamespace(summary=SimpleNamespace(id=run_id, parent=parent))

    cycle = [run("a", "b"), run("b", "a"), run("c", None), run("d", "c")]
    listed = _nested(cycle)
    assert sorted(r.summary.id for _, r in listed) == ["a", "b", "c", "d"]
    assert [(depth, r.summary.id) for depth, r in listed][:2] == [(0, "c"), (1, "d")]
    deep = [run("r0", None)] + [run(f"r{n}", f"r{n - 1}") for n in range(1, 12)]
    assert len(_nested(deep, deepest=3)) == 12
