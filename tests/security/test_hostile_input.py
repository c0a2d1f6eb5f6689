"""Hostile or careless input against a real server and worker: long and odd ids and keys,
wildcard keys, a body naming another task. Each was a finding: a 5,000-character key
stopped every worker, `--key '>' --countdown 900` purged every schedule of its queue,
`--key periodic.<name>` replaced a periodic schedule, `a\\nb`/`a b`/`a\\rb` were one key,
and the body's task name overrode the subject's."""

from __future__ import annotations

import json

import nats

from taskq import App
from taskq.dlq.browse import list_dead
from taskq.registry import list_workers
from taskq.results import fetch
from taskq.schedules import list_schedules
from tests.conftest import run_cli, running_worker, wait_until

APP = "tests.apps.ledger:app"


def test_a_key_over_the_limit_is_one_line_and_exit_2(nats_url: str, prefix: str) -> None:
    out = run_cli(nats_url, prefix, "enqueue", APP, "quick", '["x"]', "--key", "k" * 5000)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "taskq enqueue: key is 5000 characters long: at most 1024"
    ]


async def test_a_message_with_a_huge_id_is_settled_and_the_worker_goes_on(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task
    async def echo(text: str) -> str:
        return text

    huge = "k" * 5000
    nc = await nats.connect(nats_url)
    try:
        async with running_worker(app) as worker:
            body = json.dumps({"id": huge, "args": ["big"]}).encode()
            await nc.jetstream().publish(f"{prefix}.q.default.echo", body)
            await wait_until(lambda: worker.stats["succeeded"] == 1, timeout=20)
            # the worker is still connected and listed, and runs what comes next
            after = await echo.enqueue("after")
            assert await after.result(timeout=20) == "after"
            assert [w.pid for w in await list_workers(app)]
    finally:
        await nc.close()
    record = await fetch(app, huge)  # read back by its id, on a connection that stays up
    assert record is not None and record.result == "big"
    assert (await app.client()).connection.connected


async def test_odd_keys_are_distinct_and_each_handle_gets_its_own_result(app: App) -> None:
    @app.task
    async def echo(text: str) -> str:
        return text

    keys = ["a\nb", "a b", "a\rb", "x\r\nNats-Rollup: all", "é/😀", "k" * 1024]
    async with running_worker(app):
        handles = [await echo.options(key=k).enqueue(f"for {i}") for i, k in enumerate(keys)]
        assert [h.duplicate for h in handles] == [False] * len(keys)
        results = [await h.result(timeout=20) for h in handles]
    assert results == [f"for {i}" for i in range(len(keys))]


async def test_wildcard_and_schedule_like_keys_touch_no_other_schedule(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task
    async def later(n: int) -> None: ...

    @app.periodic(every=3600, name="nightly")
    async def nightly() -> None: ...

    @app.task(name="quick")  # what the CLI enqueues below (tests.apps.ledger's task)
    async def quick(token: str) -> None: ...

    async with running_worker(app) as worker:
        await later.options(countdown=900).enqueue(1)
        for key in (">", "*", "periodic.nightly", "a b", "periodic"):
            out = run_cli(
                nats_url, prefix, "enqueue", "tests.apps.ledger:app", "quick", '["x"]',
                "--key", key, "--countdown", "900",
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
        await wait_until(lambda: worker.stats["held"] == 6, timeout=30)
    listed = await list_schedules(app)
    periodic = [s for s in listed if s.name == "periodic.nightly"]
    assert len(listed) == 7 and len(periodic) == 1  # six delayed tasks and the periodic
    assert periodic[0].expression == "@every 3600s"


async def test_the_subject_decides_which_task_runs(app: App, nats_url: str, prefix: str) -> None:
    ran: list[str] = []

    @app.task
    async def echo(text: str) -> None:
        ran.append(f"echo {text}")

    @app.task
    async def wipe(text: str) -> None:
        ran.append(f"wipe {text}")

    nc = await nats.connect(nats_url)
    try:
        async with running_worker(app) as worker:
            # permission to publish echo must not run wipe
            body = json.dumps({"task": "wipe", "args": ["all"]}).encode()
            await nc.jetstream().publish(f"{prefix}.q.default.echo", body)
            await wait_until(lambda: worker.stats["dead"] == 1, timeout=20)
    finally:
        await nc.close()
    assert ran == []
    [letter] = await list_dead(app)
    assert letter.reason == "undecodable" and "its subject 'echo'" in letter.error.message
