"""Spark job and batch tasks over Spark Connect (`sc://`), against a real Connect server
started from PySpark's own `sbin/`: results, per-item outcomes, cancel and timeout mid-job,
and the server killed mid-job and started again."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.pipeline import tasks
from examples.pipeline.__main__ import run_key
from taskq import App
from taskq.dlq.browse import list_dead
from taskq.errors import ResultTimeout, SparkUnavailable, TaskCancelled, TaskFailed
from taskq.policy import Failure, Success
from taskq.workers.spark.session import SparkRuntime
from tests.conftest import HANG, ROOT, WorkerProcess, run_cli, running_worker, wait_until
from tests.spark.conftest import spy_outcomes
from tests.spark.connect_server import START_WITHIN, ConnectServer
from tests.spark.test_pipeline import CHUNK, RECORDS, SPEC, check, starts

pytestmark = pytest.mark.spark
RESTARTED_WITHIN = 1.5 * START_WITHIN  # a restarted server's first query, beside other JVMs


def _runs(folder: Path, item: int) -> int:
    path = folder / str(item)
    return len(path.read_text()) if path.exists() else 0


def _slow_rows(folder: str, seconds: float) -> Any:
    """A `mapInArrow` function that leaves a marker, then sleeps: a job that is running."""

    def rows(batches: Iterator[Any]) -> Iterator[Any]:
        Path(folder, f"running-{time.time_ns()}").touch()
        time.sleep(seconds)
        yield from batches

    return rows


async def test_job_task_runs_on_one_reused_connect_session(app: App, connect: SparkRuntime) -> None:
    @app.task(executor="spark")
    def total(session: Any, n: int) -> int:
        return int(session.range(n).selectExpr("sum(id) AS s").first()["s"])

    async with running_worker(app, spark=connect):
        assert await (await total.enqueue(100)).result(timeout=HANG) == 4950
        first = await connect.session()
        assert await (await total.enqueue("10")).result(timeout=HANG) == 45
        assert await connect.session() is first  # one session per worker, reused
    assert type(first).__module__.startswith("pyspark.sql.connect")


async def test_batch_items_over_connect_settle_on_their_own(
    app: App, connect: SparkRuntime, tmp_path: Path
) -> None:
    """Given 60 items run as Spark jobs through mapInArrow, of which 2 fail once and 2
    always, then the good are acked after one run, the flaky after two, and the bad are
    dead-lettered with their own executor tracebacks."""
    runs = tmp_path / "runs"
    runs.mkdir()
    bad, flaky = {7, 33}, {5, 40}

    @app.batch_task(batch_size=25, max_wait=0.3, max_retries=1, backoff=0.2, jitter=0)
    def cube(i: int) -> int:
        with open(runs / str(i), "a") as marker:  # executors are other processes
            marker.write("x")
        if i in bad or (i in flaky and _runs(runs, i) == 1):
            raise ValueError(f"bad item {i}")
        return i**3

    async with running_worker(app, spark=connect) as worker:
        outcomes = spy_outcomes(worker)
        handles = await cube.enqueue_many(range(60))
        await wait_until(
            lambda: worker.stats["succeeded"] == 58 and worker.stats["dead"] == 2, timeout=HANG
        )
    assert [await handles[i].result(timeout=5) for i in (0, 5, 40, 59)] == [0, 125, 64000, 205379]
    with pytest.raises(TaskFailed, match="bad item 33"):
        await handles[33].result(timeout=5)
    expected_runs = {i: 2 if i in bad | flaky else 1 for i in range(60)}
    assert {i: _runs(runs, i) for i in range(60)} == expected_runs
    assert worker.stats["retried"] == 4 and worker.stats["dead:exhausted"] == 2
    assert all(isinstance(o.error, ValueError) for _, o in outcomes if isinstance(o, Failure))
    assert sum(isinstance(o, Success) for _, o in outcomes) == 58
    dead = await list_dead(app)
    assert sorted(d.message.args[0] for d in dead) == sorted(bad)
    for record in dead:
        assert record.error.type == "ValueError" and record.attempts == 2
        assert f"bad item {record.message.args[0]}" in record.error.traceback
        assert "in cube" in record.error.traceback  # the executor's own traceback


async def test_cancel_and_timeout_interrupt_the_connect_job(
    app: App, connect: SparkRuntime, tmp_path: Path, nats_url: str, prefix: str
) -> None:
    """`taskq cancel` of a running Spark job, and a job past its timeout: the Connect
    operation is interrupted (the driver call returns at once instead of in 120 s)."""
    returned: dict[str, float] = {}

    def run_long(session: Any, name: str) -> None:
        try:
            frame = session.range(2).repartition(2)
            frame.mapInArrow(_slow_rows(str(tmp_path), 120), "id long").collect()
        finally:
            returned[name] = time.monotonic()

    @app.task(executor="spark", max_retries=0)
    def stuck(session: Any, name: str) -> None:
        run_long(session, name)

    @app.task(executor="spark", max_retries=0, timeout=1.5)
    def timed(session: Any, name: str) -> None:
        run_long(session, name)

    async with running_worker(app, spark=connect) as worker:
        handle = await stuck.enqueue("cancelled")
        await wait_until(lambda: any(tmp_path.glob("running-*")), timeout=HANG)
        done = run_cli(nats_url, prefix, "cancel", handle.id)
        assert done.returncode == 0, done.stderr
        await wait_until(lambda: "cancelled" in returned, timeout=HANG)
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=HANG)
        late = await timed.enqueue("timed out")
        await wait_until(lambda: "timed out" in returned, timeout=HANG)
        with pytest.raises(TaskFailed, match="TaskTimeout"):
            await late.result(timeout=HANG)
    assert worker.stats["dead:exhausted"] == 1


@pytest.mark.heavy
@pytest.mark.timeout(420)  # a JVM restarted and warmed up: 35 s alone, 120-200 s in the suite
async def test_connect_server_killed_mid_job(
    app: App, connect: SparkRuntime, connect_server: ConnectServer, tmp_path: Path
) -> None:
    """Given the Connect server SIGKILLed while a job task's Spark job runs, and started
    again, then the task retries on a new session and succeeds once, settled once."""
    attempts = tmp_path / "attempts"

    # retries enough to span a restart on a loaded machine (each failed attempt: ~10 s)
    @app.task(executor="spark", max_retries=30, backoff=1.0, backoff_max=3.0, jitter=0)
    def slow_sum(session: Any) -> int:
        with open(attempts, "a") as marker:
            marker.write("x")
        frame = session.range(10).repartition(2).mapInArrow(_slow_rows(str(tmp_path), 3), "id long")
        return int(frame.selectExpr("sum(id) AS s").first()["s"])

    async with running_worker(app, spark=connect) as worker:
        outcomes = spy_outcomes(worker)
        handle = await slow_sum.enqueue()
        await wait_until(lambda: any(tmp_path.glob("running-*")), timeout=HANG)
        connect_server.kill()
        # started again at once: the running attempt fails whether the server is still down
        # when its client gives up (UNAVAILABLE) or back (its session unknown there)
        # not warmed by a query of its own: the task's retry is the restarted server's
        # first query (30 to 60 s under the suite's load, on top of the JVM's start)
        began = time.monotonic()
        await asyncio.to_thread(connect_server.start, warm=False)
        listening = time.monotonic() - began
        try:  # the restarted server's first query: 30-60 s loaded, longer beside other JVMs
            assert await handle.result(timeout=RESTARTED_WITHIN) == 45
        except ResultTimeout:
            pytest.fail(
                f"listening again after {listening:.0f}s, then no result in {RESTARTED_WITHIN:g}s; "
                f"attempts {attempts.read_text()!r}, outcomes {outcomes}, "
                f"server log: {connect_server.log_tail()}"
            )
    failures = [o for _, o in outcomes if isinstance(o, Failure)]
    unclassified = [o.traceback for o in failures if not isinstance(o.error, SparkUnavailable)]
    assert failures and not unclassified, "\n".join(t or "" for t in unclassified)
    assert [o for _, o in outcomes if isinstance(o, Success)] == [Success(45)]
    assert worker.stats["succeeded"] == 1 and worker.stats["dead"] == 0
    assert len(attempts.read_text()) == len(outcomes)  # every attempt judged once


@pytest.mark.slow  # run before a change to the Spark path: pytest -m slow tests/spark
async def test_the_pipeline_runs_unchanged_on_connect(
    nats_url: str,
    prefix: str,
    tmp_path: Path,
    worker_process: Callable[..., WorkerProcess],
    connect_url: str,
) -> None:
    """`examples/pipeline` (a durable workflow, a Spark batch fan-out, a Spark job) on a
    `taskq worker` process with only TASKQ_SPARK_MASTER pointing at the Connect server."""
    tasks.app.configure(url=nats_url, prefix=prefix)
    run_dir = tmp_path / "run"
    try:
        worker = worker_process(SPEC, env={"TASKQ_SPARK_MASTER": connect_url})
        await worker.wait_ready()
        run = await tasks.pipeline.options(key=run_key(run_dir)).start(str(run_dir), RECORDS, CHUNK)
        result = await run.result(timeout=HANG * 2)
    finally:
        await tasks.app.aclose()
    assert sorted(starts(run_dir).values()) == [1] * len(starts(run_dir))  # each stage once
    check(run_dir, result, {})


@pytest.mark.slow  # the demo's Connect option; the local demo runs by default (test_cli)
def test_the_demo_runs_its_spark_part_over_connect(connect_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "taskq", "demo", "--tasks", "20", "--spark-master", connect_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG * 2,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"on Spark Connect {connect_url}" in done.stdout
    assert "sum_of_range(1,000,000) = 499,999,500,000" in done.stdout
    assert "1,000 word_score items run in Spark batches" in done.stdout
    assert "succeeded      1024" in done.stdout  # 1,001 of them on Spark
