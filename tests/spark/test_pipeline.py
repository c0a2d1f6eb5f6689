"""The pipeline example (`examples/pipeline`) as a durable workflow, against a real server and
a real local Spark: a `taskq worker` process SIGKILLed once a stage finished, another worker
takes over (in this process on the tests' shared SparkSession; marked `slow`, another worker
process with its own), the run completes with the numbers computed here without Spark, and
the stages' ledger (`stages.log`) shows that no stage finished before the kill ran again."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples.pipeline import tasks
from examples.pipeline.__main__ import run_key
from examples.pipeline.records import clean_order, synthetic_orders
from taskq import WorkflowRun
from taskq.errors import NotFound
from taskq.workers.spark.session import SparkRuntime
from taskq.workflows.views import show_run
from tests.conftest import ROOT, WorkerProcess, running_worker, wait_until

SPEC = "examples.pipeline.tasks:app"
ENV = {"TASKQ_SPARK_MASTER": "local[2]"}
RECORDS = 2_000
CHUNK = 250  # 8 chunks: one Spark batch (the default test)
SMALL_CHUNK = 40  # 50 chunks: four Spark batches of at most 16 (the slow test)


def expected(records: int, chunk: int) -> tuple[int, int, float]:
    """(raw orders, clean orders, revenue in EUR), computed here without Spark."""
    orders = [
        order
        for number, first in enumerate(range(0, records, chunk))
        for order in synthetic_orders(first, min(chunk, records - first), seed=number)
    ]
    kept = [c for c in map(clean_order, orders) if c is not None]
    return len(orders), len(kept), round(sum(c["amount_eur"] for c in kept), 2)


async def steps_of(run_id: str) -> dict[int, tuple[str, str]]:
    """The run's steps so far, as `taskq workflows show` tells them: n -> (task, state)."""
    try:
        view = await show_run(await tasks.app.client(), run_id)
    except NotFound:  # its first decision has not written its summary yet
        return {}
    return {s.n: (s.target, s.state) for s in view.steps}


def stage_of(n: int, chunks: int) -> tuple[str, str]:
    """Step `n`'s stage and what its ledger lines name: generate is step 0, then one clean
    step per chunk in order, then report."""
    if n == 0:
        return "generate", ""
    if n <= chunks:
        return "clean", f"part-{n - 1:05d}.jsonl"
    return "report", ""


def starts(run_dir: Path) -> Counter[tuple[str, str]]:
    """How many times each stage started: (stage, chunk or "") -> count."""
    counted: Counter[tuple[str, str]] = Counter()
    for line in (run_dir / "stages.log").read_text().splitlines():
        stage, ident, event, _pid, _at = line.split()
        if event == "start":
            counted[(stage, ident if stage == "clean" else "")] += 1
    return counted


async def start_then_kill(
    start: Callable[..., WorkerProcess],
    run_dir: Path,
    kill_when: Callable[[dict[int, tuple[str, str]]], bool],
    chunk: int = CHUNK,
) -> tuple[WorkflowRun, dict[int, str]]:
    """Start the pipeline on a worker process and SIGKILL it once `kill_when(its steps)`;
    (the run, the steps that had succeeded at the kill: n -> task)."""
    first = start(SPEC, env=ENV)
    await first.wait_ready()
    run = await tasks.pipeline.options(key=run_key(run_dir)).start(str(run_dir), RECORDS, chunk)
    steps: dict[int, tuple[str, str]] = {}

    async def ready() -> bool:
        steps.update(await steps_of(run.id))
        return kill_when(steps)

    await wait_until(ready, timeout=120, every=0.05)
    first.kill()  # SIGKILL
    return run, {n: task for n, (task, state) in steps.items() if state == "succeeded"}


def check(
    run_dir: Path, result: dict[str, Any], at_kill: dict[int, str], chunk: int = CHUNK
) -> Counter[tuple[str, str]]:
    """The result is what this test computes without Spark, every stage ran, and none that
    had finished at the kill started again; how many times each stage started."""
    raw, clean, revenue = expected(RECORDS, chunk)
    assert result["raw_orders"] == raw and result["clean_orders"] == clean
    assert result["revenue_eur"] == pytest.approx(revenue, abs=0.02)
    chunks = -(-RECORDS // chunk)
    counted = starts(run_dir)
    every = [stage_of(n, chunks) for n in range(chunks + 2)]
    assert all(counted[stage] >= 1 for stage in every), counted  # every stage ran
    # no stage that had finished (its step journaled) when the worker died started again
    again = {stage: counted[stage] for n in at_kill if counted[stage := stage_of(n, chunks)] != 1}
    assert again == {}, (at_kill, counted)
    assert len(list((run_dir / "clean").glob("part-*.jsonl"))) == chunks
    assert (run_dir / "report" / "by_country_month.csv").is_dir()
    return counted


@pytest.mark.heavy
@pytest.mark.timeout(300)  # ~20 s; a loaded machine's cold Spark SQL takes longer
async def test_the_pipeline_resumes_on_another_worker_without_regenerating(
    nats_url: str,
    prefix: str,
    tmp_path: Path,
    worker_process: Callable[..., WorkerProcess],
    spark: SparkRuntime,
) -> None:
    tasks.app.configure(url=nats_url, prefix=prefix)
    run_dir = tmp_path / "run-1"
    began = time.monotonic()
    try:
        # Given a worker process that finished `generate` and went on to the fan-out (its
        # clean steps issued: waiting for that, not only for generate's end in the journal,
        # leaves generate's ack time to go out; a step killed between the two runs again)
        # When it is SIGKILLed (as it starts Spark) and another worker takes over
        run, at_kill = await start_then_kill(worker_process, run_dir, lambda steps: 1 in steps)
        async with running_worker(tasks.app, spark=spark):  # on the tests' shared session
            result = await run.result(timeout=180)
        assert await run.status() == "succeeded"
    finally:
        await tasks.app.aclose()
    # Then the run completes, with the numbers computed here, and generate ran once
    assert at_kill.get(0) == "generate"
    check(run_dir, result, at_kill)
    print(f"pipeline with one kill after generate: {time.monotonic() - began:.1f}s")
    # and `python -m examples.pipeline --run` follows the same run (its key is the folder's)
    followed = subprocess.run(
        [sys.executable, "-m", "examples.pipeline", "--out", str(tmp_path), "--run", "run-1"],
        cwd=ROOT,
        env={**os.environ, "TASKQ_URL": nats_url, "TASKQ_PREFIX": prefix},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert f"workflow run {run_key(run_dir)}" in followed.stdout
    assert f'"clean_orders": {result["clean_orders"]}' in followed.stdout
    assert starts(run_dir)[("generate", "")] == 1  # following it ran nothing again


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_the_pipeline_resumes_mid_fan_out_without_recleaning_finished_chunks(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    tasks.app.configure(url=nats_url, prefix=prefix)
    run_dir = tmp_path / "run-2"
    try:
        # Given a worker process whose Spark batch cleaned a first chunk (its step journaled)
        # When it is SIGKILLed and another worker process (another SparkSession) starts
        run, at_kill = await start_then_kill(
            worker_process,
            run_dir,
            lambda steps: ("clean", "succeeded") in steps.values(),
            SMALL_CHUNK,
        )
        second = worker_process(SPEC, env=ENV)
        await second.wait_ready()
        result = await run.result(timeout=300)
        assert await run.status() == "succeeded"
    finally:
        await tasks.app.aclose()
    # Then the run completes and no finished chunk was cleaned again
    assert "report" not in at_kill.values()
    counted = check(run_dir, result, at_kill, SMALL_CHUNK)
    cleaned = sum(1 for task in at_kill.values() if task == "clean")
    again = sorted(ident for (stage, ident), n in counted.items() if n > 1)
    chunks = RECORDS // SMALL_CHUNK
    print(f"{cleaned} of {chunks} chunks clean at the kill; started again (in flight): {again}")
