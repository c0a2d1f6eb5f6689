"""Progress (`ctx.progress`, `handle.watch`, `taskq result --follow`) and a task's story
(`taskq task ID`) against a real server."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

import taskq
from taskq import App, Retry
from taskq.errors import ValidationError
from tests.apps import cpu
from tests.conftest import cli_argv, run_cli, running_worker, wait_until


async def test_progress_is_watched_end_to_end(app: App) -> None:
    go = asyncio.Event()

    @app.task
    async def steps(n: int) -> str:
        ctx = taskq.current()
        await go.wait()
        for i in range(1, n + 1):
            ctx.progress(i / n, f"step {i}")
            await asyncio.sleep(0.3)  # slower than the writer's interval: every step is seen
        return "done"

    async with running_worker(app):
        handle = await steps.enqueue(4)
        seen: list[tuple[float, str | None]] = []

        async def follow() -> None:
            async for report in handle.watch():
                seen.append((report.value, report.message))  # type: ignore[arg-type]

        watcher = asyncio.create_task(follow())
        await asyncio.sleep(0.2)
        go.set()
        await asyncio.wait_for(watcher, 20)  # the iteration ends with the task
        assert await handle.result(timeout=5) == "done"
    assert seen == [(0.25, "step 1"), (0.5, "step 2"), (0.75, "step 3"), (1.0, "step 4")]
    latest = await handle.progress()
    assert latest is not None and latest.value == 1.0 and latest.attempt == 1


async def test_progress_in_a_tight_loop_is_cheap_and_the_last_value_wins(app: App) -> None:
    @app.task
    def tight(n: int) -> float:
        ctx = taskq.current()
        started = time.perf_counter()
        for i in range(n):
            ctx.progress({"done": i + 1, "of": n})
        return time.perf_counter() - started

    async with running_worker(app):
        handle = await tight.enqueue(20_000)
        took = await handle.result(timeout=30)
    print(f"20,000 progress calls took {took:.3f} s")  # a figure, not a bound
    latest = await handle.progress()
    assert latest is not None and latest.value == {"done": 20_000, "of": 20_000}
    # coalesced: the worker wrote a few reports a second, not one per call (every write is
    # a revision in this prefix's progress bucket, and only this task reported)
    client = await app.client()
    _, writes = await client.connection.kv.span(app.names.progress_bucket)
    assert 1 <= writes < 1_000, writes


def test_progress_values_are_checked() -> None:
    from taskq.records.progress import checked

    assert checked(0.5, "half") == (0.5, "half")
    nan = float("nan")
    for bad in (1.5, -0.1, nan, "half", True, {"x": object()}, {"rate": [1.0, nan]}):
        with pytest.raises(ValidationError):
            checked(bad, None)


async def test_progress_from_a_process_pool_child_and_result_follow(
    cpu_app: App, nats_url: str, prefix: str
) -> None:
    async with running_worker(cpu_app, queues=["control"], pool_size=1):
        handle = await cpu.long_spin.enqueue(60)  # ~0.6 s, a report per step
        follow = await asyncio.create_subprocess_exec(
            *cli_argv(nats_url, prefix, "result", handle.id, "--follow", "--timeout", "30"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(follow.communicate(), 60)
    lines = out.decode().splitlines()
    assert follow.returncode == 0, err.decode()
    assert any(line.startswith("progress") for line in lines), lines
    assert lines[-2:] == [f"{handle.id}: succeeded", "60"]
    latest = await handle.progress()
    assert latest is not None and latest.value == 1.0 and latest.message == "step 60"


async def test_the_story_of_a_retried_task(app: App, nats_url: str, prefix: str) -> None:
    @app.task(max_retries=2)
    async def flaky(order: str, *, amount: int) -> dict[str, int]:
        ctx = taskq.current()
        ctx.progress(0.5, "half way")
        if ctx.attempt == 1:
            raise Retry(delay=0.05, reason="first time fails")
        return {"charged": amount}

    async with running_worker(app):
        handle = await flaky.enqueue("o-1", amount=42)
        await handle.result(timeout=15)
    result = run_cli(nats_url, prefix, "task", handle.id, "--json")
    assert result.returncode == 0, result.stderr
    told = json.loads(result.stdout)
    assert told["task"] == "flaky" and told["queue"] == "default"
    assert told["state"] == "succeeded" and told["result"] == {"charged": 42}
    assert told["args"] == ["o-1"] and told["kwargs"] == {"amount": 42}
    assert told["enqueued_at"]
    assert [(a["number"], a["state"]) for a in told["attempts"]] == [
        (1, "failed"),
        (2, "succeeded"),
    ]
    assert told["attempts"][0]["error"]["type"] == "Retry"
    assert all(a["worker"] and a["started_at"] and a["ended_at"] for a in told["attempts"])
    assert told["progress"]["value"] == 0.5
    text = run_cli(nats_url, prefix, "task", handle.id).stdout
    assert f"flaky[{handle.id}]  succeeded" in text and "attempt 1" in text


async def test_the_story_of_a_queued_a_running_and_a_dead_task(
    app: App, nats_url: str, prefix: str
) -> None:
    started = threading.Event()
    release = threading.Event()

    @app.task
    def holds() -> None:
        started.set()
        release.wait(20)

    @app.task(max_retries=0)
    async def broken() -> None:
        raise ValueError("no good")

    waiting = await holds.enqueue()
    told = json.loads(run_cli(nats_url, prefix, "task", waiting.id, "--json").stdout)
    assert (told["state"], told["task"], told["attempts"]) == ("queued", "holds", [])
    async with running_worker(app, concurrency=2):
        await asyncio.to_thread(started.wait, 10)
        await wait_until(lambda: _listed(app, waiting.id), timeout=15)
        told = json.loads(run_cli(nats_url, prefix, "task", waiting.id, "--json").stdout)
        assert told["state"] == "running" and told["running_on"]
        release.set()
        dead = await broken.enqueue()
        with pytest.raises(taskq.TaskFailed):
            await dead.result(timeout=10)
    told = json.loads(run_cli(nats_url, prefix, "task", dead.id, "--json").stdout)
    assert told["state"] == "dead" and told["error"]["type"] == "ValueError"
    assert (
        told["dead_letter"]["reason"] == "permanent" or told["dead_letter"]["reason"] == "exhausted"
    )
    assert "no good" in told["error"]["traceback"] or "no good" in told["error"]["message"]
    unknown = run_cli(nats_url, prefix, "task", "nope")
    assert unknown.returncode == 1 and "unknown task id nope" in unknown.stderr


async def _listed(app: App, task_id: str) -> bool:
    from taskq.records.heartbeats import running_on

    return bool(await running_on(app, task_id))
