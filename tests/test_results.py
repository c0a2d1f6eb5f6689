"""Results: stored before the ack, awaited by watching the key, failures re-raised typed."""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import pytest

from taskq import App, Reject
from taskq.errors import ResultTimeout, TaskFailed
from tests.conftest import run_cli, running_worker


async def test_result_round_trip_and_status(app: App) -> None:
    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    @app.task
    def nothing() -> None:
        return None

    handle = await add.enqueue(2, 3)
    assert await handle.status() == "queued"
    async with running_worker(app):
        assert await handle.result(timeout=10) == 5
        assert await (await nothing.enqueue()).result(timeout=10) is None
    assert await handle.status() == "succeeded"
    again = app.handle(handle.id)
    assert await again.result(timeout=1) == 5


async def test_failure_is_reraised_typed(app: App) -> None:
    @app.task(max_retries=1, backoff=0.05, jitter=0)
    async def broken(x: int) -> int:
        raise ZeroDivisionError(f"cannot divide {x}")

    @app.task
    async def refuses() -> None:
        raise Reject("not allowed")

    async with running_worker(app):
        handle = await broken.enqueue(4)
        with pytest.raises(TaskFailed) as info:
            await handle.result(timeout=10)
        rejected = await refuses.enqueue()
        with pytest.raises(TaskFailed) as info2:
            await rejected.result(timeout=10)
    err = info.value
    assert err.type == "ZeroDivisionError" and "cannot divide 4" in err.message
    assert "ZeroDivisionError" in err.traceback and err.reason == "exhausted"
    assert err.state == "dead" and err.task_id == handle.id
    assert info2.value.reason == "permanent" and info2.value.type == "Reject"


async def test_result_timeout_and_sync_twin(app: App) -> None:
    @app.task
    async def slow() -> str:
        await asyncio.sleep(0.5)
        return "done"

    handle = await slow.enqueue()
    with pytest.raises(ResultTimeout) as info:
        await handle.result(timeout=0.2)  # no worker yet
    assert info.value.state == "queued"
    async with running_worker(app):
        value = await asyncio.to_thread(handle.result_sync, 10)
    assert value == "done"


async def test_opt_out_stores_nothing_on_success_and_never_lies(app: App) -> None:
    from taskq.records.results import fetch

    @app.task(store_result=False)
    async def fire_and_forget() -> int:
        return 1

    @app.task(store_result=False, max_retries=0)
    async def doomed() -> None:
        raise ValueError("no")

    handle = await fire_and_forget.enqueue()
    failing = await doomed.enqueue()
    # Given a task that keeps no record of its success, not run yet: it is queued
    assert await handle.status() == "queued"
    async with running_worker(app):
        # When it ran: result() returns (no value kept), and status() says succeeded
        assert await handle.result(timeout=10) is None
        with pytest.raises(TaskFailed):
            await failing.result(timeout=10)
    assert await handle.status() == "succeeded"
    assert await fetch(app, handle.id) is None  # nothing was stored for the success
    assert await failing.status() == "dead"  # failures are recorded all the same


async def test_cli_result(app: App, nats_url: str, prefix: str) -> None:
    @app.task
    async def greet(name: str) -> str:
        return f"hello {name}"

    async with running_worker(app):
        handle = await greet.enqueue("taskq")
        await handle.result(timeout=10)
    out = run_cli(nats_url, prefix, "result", handle.id, "--wait", "--timeout", "5", "--json")
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["state"] == "succeeded" and body["result"] == "hello taskq"
    # an id with no record is `queued` only while its message waits somewhere
    waiting = await greet.enqueue("later")
    out = run_cli(nats_url, prefix, "result", waiting.id, "--json")
    assert json.loads(out.stdout)["state"] == "queued", out.stderr
    out = run_cli(nats_url, prefix, "result", "no-such-task", "--json")
    assert json.loads(out.stdout)["state"] == "unknown", out.stderr


@pytest.mark.slow  # a speed figure (bench/run.py measures latency): `pytest -m slow -s`
async def test_result_wait_latency(app: App) -> None:
    """Enqueue → result in hand, sequentially: the p50 of docs/results-workflows-schedules.md,
    printed and bounded loosely."""

    @app.task
    async def echo(i: int) -> int:
        return i

    samples = []
    async with running_worker(app):
        for i in range(100):
            start = time.perf_counter()
            assert await (await echo.enqueue(i)).result(timeout=10) == i
            samples.append(time.perf_counter() - start)
    p50 = statistics.median(samples[10:]) * 1000
    print(f"result-wait round trip p50 {p50:.2f} ms")
    assert p50 < 100


async def test_a_result_seen_on_its_subject_is_returned_once_it_is_stored(
    app: App, nats_url: str
) -> None:
    """The waiter hears a record as the server routes it, which can be before its stream
    has stored it; a caller told the task ended must then find that end stored. Here a
    final record reaches the key's subject without being stored (its publish names a
    stream that is not the bucket's: the stream refuses it, the subscription still gets
    it), and the real one is stored a moment later: `result()` returns the stored one,
    and `status()` agrees with it."""
    import nats

    from taskq.ids import safe_id
    from taskq.records.results import ResultRecord, encoded, store

    @app.task
    async def later() -> int:
        return 0

    client = await app.client()
    handle = await later.enqueue()  # no worker: the test writes its records
    subject = f"$KV.{client.results.of(safe_id(handle.id))}.{safe_id(handle.id)}"
    heard = encoded({"state": "succeeded", "task": "later", "result": 1})
    stored = ResultRecord(state="succeeded", task="later", result=2)

    async def write() -> None:
        nc = await nats.connect(nats_url)
        try:  # heard, never stored: again and again, so the waiter's subscription hears it
            for _ in range(20):
                refused = {"Nats-Expected-Stream": "NOT_THIS_ONE"}
                await nc.publish(subject, heard, headers=refused)
                await nc.flush()
                await asyncio.sleep(0.01)
        finally:
            await nc.close()
        await store(client, handle.id, stored)

    writer = asyncio.create_task(write())
    assert await handle.result(timeout=10) == 2
    assert await handle.status() == "succeeded"
    await writer
