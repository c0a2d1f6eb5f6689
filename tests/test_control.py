"""The control plane against a real server: the worker registry, cancel, progress, and a
task's story (`taskq workers`, `taskq cancel`, `taskq result --follow`, `taskq task`)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import taskq
from taskq import App, TaskCancelled, chain
from taskq.records.heartbeats import list_workers
from tests.apps import cpu
from tests.conftest import run_cli, running_worker, wait_until


async def state_of(app: App, task_id: str) -> str:
    return await app.handle(task_id).status()


# -- the registry -------------------------------------------------------------------------
async def test_a_worker_is_listed_with_what_it_runs_and_leaves_when_it_stops(
    app: App, nats_url: str, prefix: str
) -> None:
    started = asyncio.Event()

    @app.task
    async def slow() -> None:
        started.set()
        await asyncio.sleep(30)

    async with running_worker(app, concurrency=3) as worker:
        handle = await slow.enqueue()
        await asyncio.wait_for(started.wait(), 10)
        found = await list_workers(app)
        assert len(found) == 1 and found[0].pid == os.getpid()
        assert found[0].queues == ["default"] and found[0].concurrency == 3
        await wait_until(lambda: _running_ids(app), timeout=15)  # the next beat lists it
        listed = json.loads(run_cli(nats_url, prefix, "workers", "--json").stdout)
        assert [t["id"] for t in listed[0]["running"]] == [handle.id]
        assert listed[0]["heartbeat_age"] < 10 and listed[0]["counts"]["succeeded"] == 0
        text = run_cli(nats_url, prefix, "workers").stdout
        assert f"running slow[{handle.id}]" in text
        worker.grace = 0.1
    assert await list_workers(app) == []  # a stopping worker deletes its record


async def _running_ids(app: App) -> list[str]:
    return [t.id for w in await list_workers(app) for t in w.running]


async def test_a_killed_worker_leaves_the_registry_within_its_ttl(
    nats_url: str, prefix: str, worker_process: Any
) -> None:
    fast = App(url=nats_url, prefix=prefix, heartbeat=0.3)  # the bucket's TTL: 0.9 s
    try:
        proc = worker_process("tests.apps.ledger:app", env={"TASKQ_HEARTBEAT": "0.3"})
        await proc.wait_ready()
        await wait_until(lambda: _pids(fast), timeout=10)
        assert await _pids(fast) == [proc.proc.pid]
        proc.kill()
        # the TTL is 3 beats (0.9 s); the server sweeps expired values about once a second:
        # 10 s bounds it generously (a record that never expired would stay forever)
        await wait_until(lambda: _gone(fast), timeout=10)
    finally:
        await fast.aclose()


async def _pids(app: App) -> list[int]:
    return [w.pid for w in await list_workers(app)]


async def _gone(app: App) -> bool:
    return await list_workers(app) == []


# -- cancel -------------------------------------------------------------------------------
async def test_cancel_a_queued_task_it_never_runs(app: App, nats_url: str, prefix: str) -> None:
    ran: list[int] = []

    @app.task
    async def work(n: int) -> int:
        ran.append(n)
        return n

    handle = await work.enqueue(1)
    other = await work.enqueue(2)
    report = await handle.cancel()
    assert (report.outcome, report.state) == ("cancelled", "queued")
    assert await handle.status() == "cancelled"
    with pytest.raises(TaskCancelled):
        await handle.result(timeout=5)
    async with running_worker(app) as worker:
        assert await other.result(timeout=10) == 2
        await wait_until(lambda: worker.stats["cancelled"] == 1)
    assert ran == [2]
    state = await (await app.client()).connection.streams.state(app.names.queue_stream("default"))
    assert state.messages == 0  # acknowledged: not left behind, not dead-lettered
    result = run_cli(nats_url, prefix, "result", handle.id)
    assert result.returncode == 1 and f"{handle.id}: cancelled" in result.stdout


async def test_cancel_a_delayed_task_it_never_runs(app: App) -> None:
    ran: list[int] = []

    @app.task
    async def later(n: int) -> None:
        ran.append(n)

    handle = await later.options(countdown=1.0).enqueue(1)
    report = await handle.cancel()
    assert (report.outcome, report.state) == ("cancelled", "delayed")
    async with running_worker(app) as worker:
        # the schedule fires after a second; its message is settled as cancelled
        await wait_until(lambda: worker.stats["cancelled"] == 1, timeout=15)
    assert ran == []
    assert await handle.status() == "cancelled"


async def test_cancel_a_running_async_task_within_a_second(app: App) -> None:
    started = asyncio.Event()
    seen: list[str] = []

    @app.task(max_retries=3)
    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async with running_worker(app) as worker:
        handle = await forever.enqueue()
        await asyncio.wait_for(started.wait(), 10)
        await handle.cancel()
        with pytest.raises(TaskCancelled):  # well before the task's 60 s sleep ends
            await handle.result(timeout=5)
        await wait_until(lambda: worker.stats["cancelled"] == 1)
    assert seen == ["cancelled"]
    assert worker.stats["retried"] == 0 and worker.stats["dead"] == 0


async def test_cancel_a_running_thread_task_is_cooperative(app: App) -> None:
    started = threading.Event()
    noticed: list[bool] = []

    @app.task
    def polling() -> str:
        started.set()
        ctx = taskq.current()
        deadline = time.monotonic() + 30
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        noticed.append(ctx.cancelled)
        return "finished anyway"

    async with running_worker(app):
        handle = await polling.enqueue()
        await asyncio.to_thread(started.wait, 10)
        report = await handle.cancel()
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=10)
    assert report.outcome in ("cancelling", "cancelled")
    assert noticed == [True]


async def test_cancel_a_running_process_task_kills_its_child(cpu_app: App, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    async with running_worker(cpu_app, queues=["control"], pool_size=1) as worker:
        handle = await cpu.long_spin.enqueue(100_000)
        await wait_until(lambda: ledger.exists() and "spinning" in ledger.read_text(), 20)
        pid = int(
            next(line for line in ledger.read_text().splitlines() if "spinning" in line).split()[-1]
        )
        await handle.cancel()
        with pytest.raises(TaskCancelled):  # the spin would take minutes
            await handle.result(timeout=10)
        await wait_until(lambda: _exited(pid))
        # the pool carries on with a new child
        assert await (await cpu.long_spin.enqueue(3)).result(timeout=20) == 3
    assert worker.stats["cancelled"] == 1


async def test_cancel_unknown_finished_and_cancelled_ids_from_the_cli(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task
    async def quick() -> int:
        return 1

    async with running_worker(app):
        done = await quick.enqueue()
        await done.result(timeout=10)
    waiting = await quick.enqueue()
    first = run_cli(nats_url, prefix, "cancel", waiting.id, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)[0]["outcome"] == "cancelled"
    again = run_cli(nats_url, prefix, "cancel", waiting.id, done.id)
    assert again.returncode == 0
    assert f"{waiting.id}: finished (cancelled)" in again.stdout
    assert f"{done.id}: finished (succeeded)" in again.stdout
    unknown = run_cli(nats_url, prefix, "cancel", "no-such-task")
    assert unknown.returncode == 1 and "no-such-task: unknown" in unknown.stdout


async def test_a_cancelled_workflow_step_stops_the_workflow(app: App) -> None:
    ran: list[str] = []

    @app.task
    async def step(name: str) -> str:
        ran.append(name)
        return name

    flow = await chain(step.s("a"), step.s("b")).enqueue()
    first = flow.id.rsplit(".", 1)[0] + ".0"  # a chain's steps are <flow>.0, <flow>.1, ...
    assert (await app.handle(first).cancel()).outcome == "cancelled"
    async with running_worker(app) as worker:
        with pytest.raises(TaskCancelled):
            await flow.result(timeout=15)
        await wait_until(lambda: worker.stats["cancelled"] == 1)
    assert ran == []


async def test_cancel_requests_survive_a_worker_restart(app: App) -> None:
    ran: list[int] = []

    @app.task
    async def work(n: int) -> None:
        ran.append(n)

    async with running_worker(app):
        pass  # a worker came and went
    handle = await work.enqueue(1)
    await handle.cancel()
    async with running_worker(app) as worker:  # a new worker loads the requests in force
        await wait_until(lambda: worker.stats["cancelled"] == 1, timeout=10)
    assert ran == []


async def test_cancel_sync_from_plain_code(app: App) -> None:
    @app.task
    async def later() -> None: ...

    handle = await later.enqueue()
    report = await asyncio.to_thread(handle.cancel_sync)  # as a Django view would call it
    assert (report.outcome, report.state) == ("cancelled", "queued")
    assert await handle.status() == "cancelled"


def _exited(pid: int) -> bool:
    """The process has exited (or is a zombie): it may exit between two looks at it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
