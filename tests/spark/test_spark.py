"""Spark job tasks and Spark batch tasks through a real worker, on one shared local session."""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from taskq import App
from taskq.dlq.browse import list_dead
from taskq.errors import TaskCancelled, TaskFailed
from taskq.policy import Failure, Success
from taskq.workers.spark.jobs import collect_frames, decode_outcomes
from taskq.workers.spark.session import SparkRuntime
from tests.conftest import HANG, run_cli, running_worker, wait_until
from tests.spark.conftest import active_jobs, spy_outcomes

pytestmark = pytest.mark.spark


def _runs(folder: Path, item: int) -> int:
    path = folder / str(item)
    return len(path.read_text()) if path.exists() else 0


async def test_job_task_gets_the_session_and_its_result_is_settled(
    app: App, spark: SparkRuntime
) -> None:
    threads: list[str] = []

    @app.task(executor="spark")
    def total(session: Any, n: int) -> int:
        threads.append(threading.current_thread().name)
        return int(session.sparkContext.parallelize(range(n), 2).sum())

    async with running_worker(app, spark=spark) as worker:
        outcomes = spy_outcomes(worker)
        handle = await total.enqueue("100")  # validated against (n: int), session skipped
        assert await handle.result(timeout=60) == 4950  # stored, as for any task
    assert outcomes == [(handle.id, Success(4950))]
    assert threads[0].startswith("taskq-spark")  # off the event loop


async def test_batch_of_1000_settles_each_item_on_its_own(
    app: App, spark: SparkRuntime, tmp_path: Path
) -> None:
    """Given 1,000 items of which 4 always fail, when they run as batch jobs, then the good
    are acked after one run each and the bad are retried once, then dead-lettered with their
    own tracebacks."""
    runs = tmp_path / "runs"
    runs.mkdir()
    bad = {7, 257, 507, 757}

    @app.batch_task(batch_size=250, max_wait=0.5, max_retries=1, backoff=0.2, jitter=0)
    def square(i: int) -> int:
        with open(runs / str(i), "a") as marker:  # executors are other processes: count in files
            marker.write("x")
        if i in bad:
            raise ValueError(f"bad item {i}")
        return i * i

    async with running_worker(app, spark=spark) as worker:
        outcomes = spy_outcomes(worker)
        handles = await square.enqueue_many(range(1000))
        await wait_until(
            lambda: worker.stats["succeeded"] == 996 and worker.stats["dead"] == 4, timeout=90
        )
    assert await handles[999].result(timeout=5) == 999 * 999
    with pytest.raises(TaskFailed, match="bad item 7"):
        await handles[7].result(timeout=5)
    assert worker.stats["retried"] == 4 and worker.stats["dead:exhausted"] == 4
    assert [i for i in range(1000) if _runs(runs, i) != (2 if i in bad else 1)] == []
    values = sorted(o.value for _, o in outcomes if isinstance(o, Success))
    assert values == sorted(i * i for i in range(1000) if i not in bad)
    assert all(isinstance(o.error, ValueError) for _, o in outcomes if isinstance(o, Failure))
    dead = await list_dead(app)
    assert sorted(d.message.args[0] for d in dead) == sorted(bad)
    for record in dead:
        item = record.message.args[0]
        assert record.error.type == "ValueError" and record.attempts == 2
        assert f"bad item {item}" in record.error.traceback
        assert "in square" in record.error.traceback  # the executor's own traceback
    broker = (await app.client()).connection
    assert (await broker.streams.state(app.names.queue_stream("default"))).messages == 0


async def test_the_task_package_reaches_the_executors_by_value(
    app: App, spark: SparkRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package the executors cannot import (on the worker's sys.path only) still runs."""
    package = tmp_path / "shipped_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rules.py").write_text("def triple(x):\n    return 3 * x\n")
    (package / "items.py").write_text(
        "from shipped_pkg.rules import triple\n\ndef item(x: int) -> int:\n    return triple(x)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    items = importlib.import_module("shipped_pkg.items")
    task = app.batch_task(batch_size=10, max_wait=0.2)(items.item)
    try:
        async with running_worker(app, spark=spark):
            handles = await task.enqueue_many(range(10))
            assert [await h.result(timeout=60) for h in handles] == [3 * x for x in range(10)]
    finally:
        for name in ("shipped_pkg.items", "shipped_pkg.rules", "shipped_pkg"):
            sys.modules.pop(name, None)


async def test_job_running_three_times_ack_wait_is_not_redelivered(
    app: App, spark: SparkRuntime
) -> None:
    runs: list[float] = []

    @app.task(executor="spark", ack_wait=1.0)
    def long_job(session: Any) -> int:
        runs.append(time.monotonic())
        rdd = session.sparkContext.parallelize([1], 1)
        return int(rdd.map(lambda x: time.sleep(3.0) or x).sum())

    async with running_worker(app, spark=spark) as worker:
        await long_job.enqueue()
        await wait_until(lambda: worker.stats["succeeded"] == 1, timeout=60)
        await asyncio.sleep(1.5)  # past ack_wait: a lost lease would redeliver by now
    assert len(runs) == 1 and worker.stats["retried"] == 0


async def test_timeout_cancels_the_spark_job_within_seconds(
    app: App, spark: SparkRuntime, spark_session: Any
) -> None:
    ended: list[float] = []

    @app.task(executor="spark", timeout=1.5, max_retries=0)
    def stuck(session: Any) -> None:
        try:
            session.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(120)).count()
        finally:
            ended.append(time.monotonic())

    async with running_worker(app, spark=spark) as worker:
        outcomes = spy_outcomes(worker)
        began = time.monotonic()
        await stuck.enqueue()
        await wait_until(lambda: worker.stats["dead"] == 1, timeout=30)
        await wait_until(lambda: ended and not active_jobs(spark_session), timeout=10)
    # the call returned: its job was cancelled, not awaited (uncancelled it runs 120 s, far
    # past the deadlines above, which only catch that); how soon is printed, not bounded
    print(f"job call returned {ended[0] - began:.2f}s after enqueue (timeout 1.5s)")
    assert worker.stats["dead:exhausted"] == 1
    assert type(outcomes[0][1].error).__name__ == "TaskTimeout"  # type: ignore[union-attr]


@pytest.mark.heavy
async def test_shutdown_mid_batch_loses_nothing(
    app: App, spark: SparkRuntime, spark_session: Any, tmp_path: Path
) -> None:
    """Given a worker stopped while its batch runs, past its grace, then every item is handed
    back (NAK), the Spark job is cancelled, and a second worker runs them all."""
    done = tmp_path / "done"
    done.mkdir()

    @app.batch_task(batch_size=100, max_wait=0.2, ack_wait=30.0)
    def slow(i: int) -> int:
        time.sleep(0.05)
        (done / str(i)).write_text("ok")
        return i

    await slow.enqueue_many(range(200))
    async with running_worker(app, spark=spark, grace=0.3) as first:
        await wait_until(lambda: len(os.listdir(done)) > 0, timeout=60)
    assert first.stats["interrupted"] > 0
    await wait_until(lambda: not active_jobs(spark_session), timeout=10)  # job cancelled
    async with running_worker(app, spark=spark) as second:
        # handed back with a NAK: redelivered at once, not after the 30 s ack_wait
        await wait_until(lambda: second.stats["succeeded"] == 200 - first.stats["succeeded"], 60)
    assert sorted(int(name) for name in os.listdir(done)) == list(range(200))
    broker = (await app.client()).connection
    assert (await broker.streams.state(app.names.queue_stream("default"))).messages == 0
    assert await list_dead(app) == []


async def test_the_dataframe_path_runs_on_a_classic_session_too(spark_session: Any) -> None:
    """Batches over Spark Connect go through mapInArrow; the same path runs on a classic
    session, each item with its own outcome (the RDD path is the other tests')."""

    def half(i: int) -> float:
        if i == 3:
            raise ValueError("three")
        return i / 2

    calls = [((i,), {}) for i in range(7)]
    rows = await asyncio.to_thread(collect_frames, spark_session, half, calls, lambda: 2)
    outcomes = decode_outcomes(rows, len(calls))
    assert [o.value for o in outcomes if isinstance(o, Success)] == [0, 0.5, 1, 2, 2.5, 3]
    failed = outcomes[3]
    assert isinstance(failed, Failure) and isinstance(failed.error, ValueError)
    assert "three" in failed.traceback and "in half" in failed.traceback


async def test_cancel_stops_a_running_spark_job(
    app: App, spark: SparkRuntime, spark_session: Any, nats_url: str, prefix: str, tmp_path: Path
) -> None:
    returned: list[float] = []

    @app.task(executor="spark", max_retries=0)
    def stuck(session: Any) -> None:
        def wait(x: int) -> int:
            (tmp_path / f"running-{x}").touch()
            time.sleep(120)
            return x

        try:
            session.sparkContext.parallelize(range(2), 2).map(wait).count()
        finally:
            returned.append(time.monotonic())

    async with running_worker(app, spark=spark):
        handle = await stuck.enqueue()
        await wait_until(lambda: any(tmp_path.glob("running-*")), timeout=HANG)
        done = run_cli(nats_url, prefix, "cancel", handle.id)
        assert done.returncode == 0, done.stderr
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=HANG)
        await wait_until(lambda: returned and not active_jobs(spark_session), timeout=HANG)
