"""`executor="process"`: tasks in child processes of the worker, against a real server."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

import taskq
from taskq import App
from taskq.dlq.browse import list_dead
from taskq.errors import ConfigError, TaskFailed
from tests.apps import cpu
from tests.conftest import run_cli, running_worker, wait_until


def ledger(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "ledger"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def test_two_cpu_bound_tasks_overlap_on_two_processes(cpu_app: App, tmp_path: Path) -> None:
    async with running_worker(cpu_app, concurrency=4, pool_size=2):
        handles = [await cpu.burn.enqueue(0.05) for _ in range(2)]
        runs = [await h.result(timeout=30) for h in handles]
    # overlapping intervals in two processes, none of them the worker's own
    assert {r["pid"] for r in runs} != {os.getpid()}
    assert len({r["pid"] for r in runs}) == 2
    first, second = sorted(runs, key=lambda r: r["start"])
    assert second["start"] < first["end"], f"ran one after the other: {runs}"
    # the start hook ran in the worker and once in each child; the worker-only one did not
    lines = ledger(tmp_path)
    hooked = [pid for kind, pid in lines if kind == "hook-start"]
    assert str(os.getpid()) in hooked and len(hooked) == 3, lines
    assert [pid for kind, pid in lines if kind == "hook-worker-only"] == [str(os.getpid())]


async def test_context_and_async_functions_in_the_child(cpu_app: App) -> None:
    async with running_worker(cpu_app, concurrency=4, pool_size=1):
        handle = await cpu.whoami.enqueue("x")
        seen = await handle.result(timeout=30)
        doubled = await (await cpu.async_in_child.enqueue(21)).result(timeout=30)
    assert seen["id"] == handle.id and seen["attempt"] == 1 and seen["task"] == cpu.whoami.name
    assert seen["queue"] == "default" and seen["deadline"] is not None
    assert seen["pid"] != os.getpid()
    assert doubled["double"] == 42 and doubled["pid"] == seen["pid"]  # the same child, reused


async def test_timeout_kills_the_child_and_the_task_is_retried(
    cpu_app: App, tmp_path: Path
) -> None:
    async with running_worker(cpu_app, concurrency=4, pool_size=1) as worker:
        handle = await cpu.hang_first.enqueue("t1")
        done = await handle.result(timeout=30)
        assert worker.stats["retried"] == 1
    assert done["attempt"] == 2
    hung = [int(pid) for kind, _, pid in (line for line in ledger(tmp_path) if len(line) == 3)]
    assert hung and done["pid"] != hung[0]  # a new child ran the retry
    assert not psutil.pid_exists(hung[0]) or psutil.Process(hung[0]).status() == "zombie"


async def test_a_dying_child_is_retried_then_dead_lettered_as_crashed(
    cpu_app: App, tmp_path: Path
) -> None:
    async with running_worker(cpu_app, concurrency=4, pool_size=1) as worker:
        handle = await cpu.die.enqueue(3)
        with pytest.raises(TaskFailed) as failed:
            await handle.result(timeout=30)
        # the worker carries on: another task runs after the crashes
        assert (await (await cpu.whoami.enqueue("after")).result(timeout=30))["label"] == "after"
        assert worker.stats["dead:crashed"] == 1
    assert failed.value.reason == "crashed"
    assert [line[0] for line in ledger(tmp_path)].count("dying") == 2
    records = await list_dead(cpu_app)
    assert [r.reason for r in records] == ["crashed"]
    assert "exited with status 3" in records[0].error.message


async def test_unpicklable_argument_or_result_fails_permanently(cpu_app: App) -> None:
    async with running_worker(cpu_app, concurrency=4, pool_size=1):
        result = await cpu.bad_result.enqueue()
        argument = await cpu.takes_sealed.enqueue("x")
        for handle, what in ((result, "result"), (argument, "arguments")):
            with pytest.raises(TaskFailed) as failed:
                await handle.result(timeout=30)
            assert failed.value.reason == "permanent"  # no retries (max_retries=3)
            assert failed.value.type == "Unpicklable"
            assert f"its {what} cannot be pickled" in failed.value.message


async def test_errors_come_back_with_their_type_and_the_child_traceback(cpu_app: App) -> None:
    async with running_worker(cpu_app, concurrency=4, pool_size=1):
        plain = await cpu.fails.enqueue("input")
        picky = await cpu.fails.enqueue("picky")
        with pytest.raises(TaskFailed) as one:
            await plain.result(timeout=30)
        with pytest.raises(TaskFailed) as two:
            await picky.result(timeout=30)
    assert one.value.type == "ValueError" and one.value.message == "bad input"
    assert "pool/child.py" in one.value.traceback and "in fails" in one.value.traceback
    # an error that cannot be rebuilt here keeps its name and message
    assert two.value.type == "RemoteItemError" and "Picky: 1/2" in two.value.message


async def test_shutdown_past_grace_kills_the_child_and_hands_the_message_back(
    cpu_app: App, tmp_path: Path
) -> None:
    async with running_worker(cpu_app, concurrency=4, pool_size=1, grace=0.2) as worker:
        handle = await cpu.hang_first.enqueue("t2")
        await wait_until(lambda: any(line[0] == "hanging" for line in ledger(tmp_path)))
    assert worker.stats["interrupted"] == 1
    pid = next(int(line[2]) for line in ledger(tmp_path) if line[0] == "hanging")
    await wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie")
    # handed back at no cost: the next worker runs it as attempt 1 again, which hangs into
    # its 1 s timeout; attempt 2 answers
    async with running_worker(cpu_app, concurrency=4, pool_size=1):
        assert (await handle.result(timeout=30))["attempt"] == 2


def test_a_process_task_must_be_importable_by_the_children(app: App) -> None:
    with pytest.raises(ConfigError, match="module level"):

        @app.task(executor="process")
        def local() -> None: ...

    assert taskq.current  # the module exports it for use inside children


async def test_the_lease_is_extended_while_the_child_runs(cpu_app: App) -> None:
    async with running_worker(cpu_app, concurrency=4, pool_size=1) as worker:
        handle = await cpu.outlasts_its_lease.enqueue(1.6)  # more than 3 ack_waits
        assert await handle.result(timeout=30) == 1
    assert worker.stats["succeeded"] == 1 and worker.stats["retried"] == 0


async def test_recycling_limits_replace_pool_processes_without_losing_a_task(
    cpu_app: App,
) -> None:
    from taskq.workers.limits import Limits

    limits = Limits(max_tasks=2)
    async with running_worker(
        cpu_app, queues=["default"], concurrency=1, pool_size=1, limits=limits
    ) as worker:
        runs = [await (await cpu.burn.enqueue(0.01)).result(timeout=30) for _ in range(5)]
    pids = [r["pid"] for r in runs]
    # two calls per process: a, a, b, b, c
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4], pids
    assert worker.stats["succeeded"] == 5 and worker.stats["retried"] == 0


def test_a_pool_process_that_cannot_start_stops_the_worker_with_one_line(
    nats_url: str, prefix: str
) -> None:
    # fresh: a worker with its pool processes, and signal handlers only a main thread can set
    result = run_cli(nats_url, prefix, "worker", "tests.apps.poolfail:app", timeout=90, fresh=True)
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("taskq: error: pool process (pid ") and "no database here" in last, last
