"""The dashboard over plain HTTP, as a script uses it: every page's JSON twin, the refusal
of actions without their CSRF token, from another site, or on a read-only dashboard, the
security headers, and no credential ever shown."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from taskq import App, chain
from taskq.dashboard.app import ACTIONS
from taskq.operate.queue_control import stored_tasks
from taskq.operate.queue_stats import queue_stats
from taskq.server import EmbeddedServer
from tests.conftest import run_cli, running_worker, wait_until
from tests.dashboard.conftest import Dashboard
from tests.roles import role, role_env


async def test_every_page_has_a_json_twin(app: App, dashboard: Dashboard) -> None:
    @app.task(max_retries=0)
    async def fail(n: int) -> None:
        raise ValueError(f"no {n}")

    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    @app.periodic(every=3600)
    async def hourly() -> None: ...

    async with running_worker(app) as worker:
        dead = await fail.enqueue(7)
        flow = await chain(add.s(1, 2), add.s(3)).enqueue()
        assert await flow.result(timeout=10) == 6
        await wait_until(lambda: worker.stats["dead"] == 1)
        http = dashboard.http
        overview = await http.api("/")
        assert [q["queue"] for q in overview["queues"]] == ["default"]
        assert overview["queues"][0]["dead"] == 1 and len(overview["workers"]) == 1
        assert [w["pid"] for w in await http.api("/workers")] == [overview["workers"][0]["pid"]]
    queue = await http.api("/queues/default")
    assert queue["queue"]["queue"] == "default" and len(queue["recent_failures"]) == 1
    story = await http.api(f"/tasks/{dead.id}")
    assert story["state"] == "dead" and story["args"] == [7] and story["dead_letter"]["seq"] == 1
    page = await http.api("/dlq")
    assert page["total"] == 1 and page["older"] is None
    assert page["records"][0]["error"] == {"type": "ValueError", "message": "no 7"}
    record = await http.api("/dlq/1")
    assert record["reason"] == "exhausted" and "ValueError: no 7" in record["error"]["traceback"]
    schedules = await http.api("/schedules")
    assert [(s["name"], s["expression"]) for s in schedules] == [
        ("periodic.hourly", "@every 3600s")
    ]
    assert schedules[0]["next_run"] is not None
    workflow = await http.api(f"/workflows/{flow.id}")
    assert workflow["kind"] == "chain" and workflow["state"] == "succeeded"
    assert [s["state"] for s in workflow["steps"]] == ["succeeded", "succeeded"]
    # Accept: application/json on the page's own URL gives the same
    same = await http.get("/dlq", accept="application/json")
    assert same.headers["content-type"] == "application/json" and same.json() == page
    missing = await http.get("/api/tasks/nope")
    assert missing.status == 404 and "no task 'nope'" in missing.json()["error"]


async def test_the_json_twins_match_the_cli(
    app: App, dashboard: Dashboard, nats_url: str, prefix: str
) -> None:
    @app.task(max_retries=0)
    async def fail(n: int) -> None:
        raise ValueError(f"no {n}")

    async with running_worker(app) as worker:
        for n in range(3):
            await fail.enqueue(n)
        await wait_until(lambda: worker.stats["dead"] == 3)
    cli = await asyncio.to_thread(run_cli, nats_url, prefix, "dlq", "ls", "--json")
    assert (await dashboard.http.api("/dlq"))["records"] == json.loads(cli.stdout)
    queues = await asyncio.to_thread(run_cli, nats_url, prefix, "queues", "--json")
    twin = (await dashboard.http.api("/"))["queues"]
    assert [q["dead"] for q in twin] == [q["dead"] for q in json.loads(queues.stdout)] == [3]


async def test_actions_need_their_csrf_token_and_the_same_site(
    app: App, dashboard: Dashboard
) -> None:
    @app.task(queue="mail")
    async def send() -> None: ...

    await send.enqueue()
    http = dashboard.http
    await http.get("/")  # the page sets the CSRF cookie
    token = http.cookie("taskq_csrf")
    assert token and len(token) >= 32
    refusals = [
        await http.post("/queues/mail/pause", {"csrf": ""}),
        await http.post("/queues/mail/pause", {"csrf": "x" * 43}),
        await http.post("/queues/mail/pause", origin="http://evil.example"),
        await http.post("/api/queues/mail/pause", {"csrf": ""}),
    ]
    assert [r.status for r in refusals] == [403, 403, 403, 403]
    assert "CSRF" in refusals[0].body and "another site" in refusals[2].body
    assert refusals[3].json() == {
        "error": "refused: the CSRF token is missing or wrong; reload the page"
    }
    assert not (await queue_stats(app, "mail")).paused
    done = await http.post("/queues/mail/pause")
    assert done.status == 303 and done.headers["location"] == "/queues/mail?notice=paused"
    assert (await queue_stats(app, "mail")).paused
    twin = await http.post("/api/queues/mail/resume", x_csrf_token=token)
    assert twin.status == 200 and twin.json()["paused"] is False
    # a destructive action asks first: a script gets 409 and the count
    ask = await http.post("/api/queues/mail/purge")
    assert ask.status == 409 and ask.json()["count"] == 1
    purged = await http.post("/api/queues/mail/purge", {"confirm": "yes"})
    assert purged.json() == {"queue": "mail", "task": None, "purged": 1}


async def test_a_read_only_dashboard_refuses_every_action(
    app: App, start_dashboard: Callable[..., Dashboard]
) -> None:
    @app.task(queue="mail")
    async def send() -> None: ...

    await send.enqueue()
    board = start_dashboard("--read-only")
    assert "taskq dashboard read-only at http://127.0.0.1:" in board.lines[0]
    page = await board.http.get("/queues/mail")
    assert page.status == 200 and 'method="post"' not in page.body
    assert "Read-only dashboard" in page.body
    for path, _ in ACTIONS:
        concrete = path.replace("{queue}", "mail").replace("{task_id:path}", "t1")
        concrete = concrete.replace("{seq:int}", "1").replace("{run_id:path}", "r1")
        reply = await board.http.post(concrete, {"confirm": "yes", "queue": "mail", "name": "x"})
        assert reply.status == 403, (path, reply.status)
        assert "read-only" in reply.body
    assert not (await queue_stats(app, "mail")).paused
    assert (await queue_stats(app, "mail")).waiting == 1


async def test_headers_and_no_credentials_on_any_page(
    app: App, nats_url: str, start_dashboard: Callable[..., Dashboard]
) -> None:
    @app.task
    async def noop() -> None: ...

    await noop.enqueue()
    secret = "s3cret-nats-password"
    with_creds = nats_url.replace("nats://", f"nats://ops:{secret}@")
    board = start_dashboard(url=with_creds, env={"TASKQ_PASSWORD": secret})
    page = await board.http.get("/")
    assert page.status == 200 and secret not in page.body
    assert f"NATS {nats_url}" in page.body  # the address, without its user and password
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert "SameSite=Strict" in page.headers["set-cookie"]
    for path in ("/api/", "/dlq", "/schedules", "/workers", "/nope"):
        assert secret not in (await board.http.get(path)).body
    assert board.stop() == 0  # SIGTERM: a clean stop


async def test_the_nats_user_s_permissions_are_the_dashboard_s(
    secure_server: EmbeddedServer,
) -> None:
    """A NATS user that may not purge a queue (deploy/nats/accounts.conf's `worker`) gives
    a dashboard that shows the queue but cannot purge it."""
    operator = role(secure_server, "operator")

    @operator.task(name="work")
    async def work() -> None: ...

    await work.enqueue()  # the operator creates the queue's stream
    stored = await stored_tasks(operator, "default")  # other tests' may wait there too
    env = role_env("worker")
    board = Dashboard(secure_server.url, "taskq", env=env)
    try:
        # it reads what the role may (the runs list; not dead letters, which pages with
        # queue figures count: the shared server holds other tests' by then)
        assert "runs" in await board.http.api("/workflows")
        # (taskq learns of a refused request when it times out: 10 s)
        refused = await board.http.post("/queues/default/purge", {"confirm": "yes"})
        assert refused.status == 403 and "NATS refused it" in refused.body
        assert await stored_tasks(operator, "default") == stored  # nothing was purged
    finally:
        board.stop()
        await operator.purge_queue("default")  # no task left for the next test's workers
        await operator.aclose()
