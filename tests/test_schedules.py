"""Server-side schedules: countdown/eta, periodic tasks, `taskq schedules`, expiry."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from taskq import App, ConfigError
from tests.apps import periodic as periodic_app
from tests.conftest import run_cli, running_worker, wait_until


async def test_countdown_and_eta_are_honoured_never_early(app: App) -> None:
    """Delayed tasks never run before they are due, and do run (how late is a figure of
    bench/, not a bound here: a shared machine makes any tight bound a flake)."""
    ran: dict[str, float] = {}

    @app.task
    async def stamp(label: str) -> None:
        ran[label] = time.time()

    async with running_worker(app):
        start = time.time()
        await stamp.options(countdown=2).enqueue("countdown")
        await stamp.options(eta=datetime.now(UTC) + timedelta(seconds=3)).enqueue("eta")
        await stamp.enqueue("now")
        await wait_until(lambda: len(ran) == 3, timeout=15)
    # the task due now ran first; each delayed one no earlier than its time
    assert ran["now"] < ran["countdown"] < ran["eta"]
    assert ran["countdown"] - start >= 2 - 0.05
    assert ran["eta"] - start >= 3 - 0.05


async def test_delayed_task_result_and_handle(app: App) -> None:
    @app.task
    async def double(x: int) -> int:
        return 2 * x

    async with running_worker(app):
        handle = await double.options(countdown=1).enqueue(21)
        assert await handle.result(timeout=10) == 42


async def test_periodic_task_fires_and_is_removed_by_rm(nats_url: str, prefix: str) -> None:
    app = periodic_app.app
    app.configure(url=nats_url, prefix=prefix)
    async with running_worker(app) as worker:
        await wait_until(lambda: worker.stats["succeeded"] >= 3, timeout=15)
        listed = json.loads(run_cli(nats_url, prefix, "schedules", "ls", "--json").stdout)
        assert [(s["name"], s["expression"]) for s in listed] == [
            ("periodic.heartbeat", "@every 1s")
        ]
        removed = run_cli(nats_url, prefix, "schedules", "rm", "periodic.heartbeat")
        assert removed.returncode == 0, removed.stderr
        await wait_until(lambda: nothing_in_flight(app, "default"), timeout=15)
        settled = worker.stats["succeeded"]
        await asyncio.sleep(2.5)  # a negative: two periods in which nothing may fire
        assert worker.stats["succeeded"] == settled  # no more firings
    assert "no schedules" in run_cli(nats_url, prefix, "schedules", "ls").stdout
    assert run_cli(nats_url, prefix, "schedules", "rm", "periodic.heartbeat").returncode == 2
    await app.aclose()


async def nothing_in_flight(app: App, queue: str) -> bool:
    """Whether every firing made so far has run: none waits to be moved from the queue's
    timer stream, none waits in the queue or runs."""
    broker = (await app.client()).connection
    names = app.names
    for stream, durable in (
        (names.timer_stream(queue), names.timer_consumer(queue)),
        (names.queue_stream(queue), names.consumer(queue)),
    ):
        state = await broker.streams.consumer_state(stream, durable)
        if state.pending or state.ack_pending:
            return False
    return True


async def test_periodic_registration_is_idempotent_and_prune_removes_stale(
    nats_url: str, prefix: str
) -> None:
    app = App(url=nats_url, prefix=prefix)

    @app.periodic(cron="0 0 3 * * *")
    async def nightly() -> None: ...

    async with running_worker(app):
        pass
    async with running_worker(app):  # second start: same schedule, not duplicated
        pass
    listed = json.loads(run_cli(nats_url, prefix, "schedules", "ls", "--json").stdout)
    assert [(s["name"], s["expression"]) for s in listed] == [("periodic.nightly", "0 0 3 * * *")]
    pruned = run_cli(nats_url, prefix, "schedules", "prune", "tests.apps.periodic:app")
    assert pruned.returncode == 0 and "pruned 1" in pruned.stdout
    assert "no schedules" in run_cli(nats_url, prefix, "schedules", "ls").stdout
    await app.aclose()


def test_bad_schedules_fail_at_declaration() -> None:
    app = App(prefix="p")
    with pytest.raises(ConfigError):
        app.periodic(cron="*/5 * * * *")(lambda: None)  # 5 fields: seconds are required
    with pytest.raises(ConfigError):
        app.periodic(every=0.5)(lambda: None)
    with pytest.raises(ConfigError):
        app.periodic()(lambda: None)
