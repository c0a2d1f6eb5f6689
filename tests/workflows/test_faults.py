"""Durable workflows under faults, against real servers and real worker processes: SIGKILLs
while a run advances step by step; each completed step ran once (a step runs again only as
a redelivery of the attempt a kill interrupted)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from taskq import WorkflowRun
from tests.apps import journaled
from tests.conftest import WorkerProcess, wait_until

SPEC = "tests.apps.journaled:app"


async def run_with_kills(
    nats_url: str,
    prefix: str,
    tmp_path: Path,
    start: Callable[..., WorkerProcess],
    *,
    steps: int,
    seconds: float,
    every: float,
) -> tuple[int, int]:
    """Run a workflow of `steps` steps on two worker processes, SIGKILLing one every
    `every` seconds until it ends; (its result, the kills)."""
    ledger = tmp_path / "ledger.txt"
    env = {"TASKQ_TEST_LEDGER": str(ledger)}
    journaled.app.configure(url=nats_url, prefix=prefix)
    procs = [start(SPEC, "-c", "4", env=env) for _ in range(2)]
    for proc in procs:
        await proc.wait_ready()
    run = await journaled.steps.start(steps, seconds)
    rng, kills = random.Random(3), 0
    while await run.status() not in ("succeeded", "dead"):
        await asyncio.sleep(every)
        victim = rng.randrange(len(procs))
        procs[victim].kill()  # SIGKILL, mid-step or mid-decision as it falls
        kills += 1
        procs[victim] = start(SPEC, "-c", "4", env=env)
        await procs[victim].wait_ready()
    result = await run.result(timeout=60)
    _check_ledger(ledger, run.id, steps)
    await journaled.app.aclose()
    for proc in procs:  # a next run's steps must not reach this run's workers (and ledger)
        proc.close()
    return result, kills


def _check_ledger(ledger: Path, run_id: str, steps: int) -> None:
    lines = [line.split() for line in ledger.read_text().splitlines()]
    runs = Counter((tid, attempt) for kind, tid, attempt in lines if kind == "start")
    done = {tid for kind, tid, _ in lines if kind == "done"}
    # every step completed, and no attempt of a step ran twice: a step ran again only as
    # the next delivery of its message (a redelivery after a kill), never anew
    assert done == {f"{run_id}.{i}" for i in range(steps)}
    assert [key for key, n in runs.items() if n > 1] == []
    again = sorted({tid for (tid, attempt) in runs if attempt != "1"})
    print(f"{steps} steps; steps run again after a kill: {len(again)} {again[:5]}")


@pytest.mark.heavy
async def test_a_workflow_survives_worker_kills_and_runs_each_completed_step_once(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    # 16 steps of 0.5 s, a kill every 0.8 s after the last restart was ready: the run
    # outlasts three kill-and-restart rounds however fast its decisions are (12 steps of
    # 0.4 s once finished after two). On a loaded machine a restart takes seconds, and the
    # other worker finishes the run meanwhile: another run then takes the remaining kills
    kills = runs = 0
    while kills < 3 and runs < 3:
        folder = tmp_path / str(runs)
        folder.mkdir()
        result, more = await run_with_kills(
            nats_url, prefix, folder, worker_process, steps=16, seconds=0.5, every=0.8
        )
        assert result == sum(range(16))
        kills, runs = kills + more, runs + 1
    assert kills >= 3, kills


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_fifty_steps_with_a_worker_killed_every_second(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    result, kills = await run_with_kills(
        nats_url, prefix, tmp_path, worker_process, steps=50, seconds=0.3, every=1.0
    )
    assert result == sum(range(50)) and kills >= 5


@pytest.mark.heavy
async def test_runs_sleeping_through_a_server_kill_all_wake_and_finish(tmp_path: Path) -> None:
    from taskq.ports import lease_port
    from taskq.server import EmbeddedServer
    from taskq.workflows.run_lists import list_runs

    port, store = lease_port(), tmp_path / "store"
    server = EmbeddedServer(port=port, store_dir=store).start()
    prefix = f"n{port}"
    ledger = tmp_path / "ledger.txt"
    env = {"TASKQ_TEST_LEDGER": str(ledger)}
    workers = [WorkerProcess(server.url, prefix, SPEC, "-c", "16", env=env) for _ in range(2)]
    journaled.app.configure(url=server.url, prefix=prefix)
    try:
        for proc in workers:
            await proc.wait_ready()
        runs = [await journaled.nap.start(i, 4.0) for i in range(100)]
        client = await journaled.app.client()

        async def asleep() -> bool:
            return len(await list_runs(client, state="sleeping", limit=1000)) == 100

        # Given 100 runs asleep (their timers held on the server, no worker held)
        await wait_until(asleep, timeout=60)
        # When the server is SIGKILLed and started again on its store
        server.kill()
        server = EmbeddedServer(port=port, store_dir=store).start()
        # Then every run wakes and finishes, on the workers that reconnected
        results = [await run.result(timeout=120) for run in runs]
        assert results == list(range(100))
    finally:
        await journaled.app.aclose()
        for proc in workers:
            proc.close()
        server.stop()


async def taken_over_after(
    nats_url: str,
    prefix: str,
    tmp_path: Path,
    start: Callable[..., WorkerProcess],
    fault: dict[str, str],
    steps: int,
) -> tuple[WorkflowRun, list[str]]:
    """Start a run of `steps` instant steps on a worker process that SIGKILLs itself at
    the injected `fault`, then a healthy worker; (the run, the steps' ledger lines of
    their starts, sorted), once the run ended."""
    ledger = tmp_path / "ledger.txt"
    env = {"TASKQ_TEST_LEDGER": str(ledger)}
    journaled.app.configure(url=nats_url, prefix=prefix)
    dying = start(SPEC, env={**env, **fault})
    await dying.wait_ready()
    run = await journaled.steps.start(steps, 0.0)
    await wait_until(lambda: dying.proc.poll() is not None, timeout=30)
    healthy = start(SPEC, env=env)
    await healthy.wait_ready()
    await run.result(timeout=30)
    starts = sorted(line for line in ledger.read_text().splitlines() if line.startswith("start"))
    return run, starts


async def test_a_step_whose_worker_died_after_journaling_it_is_not_run_again(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    # Given a worker that dies right after a step's outcome is journaled, before its ack
    # When another worker gets the step's message again
    fault = {"TASKQ_TEST_DIE_AFTER_JOURNAL": "1"}
    run, starts = await taken_over_after(nats_url, prefix, tmp_path, worker_process, fault, 1)
    # Then the run ends with the journaled outcome, and the step ran once
    assert await run.result(timeout=30) == 0
    assert starts == [f"start {run.id}.0 1"]
    await journaled.app.aclose()


@pytest.mark.parametrize("dies_after", ["commands", "end"])
async def test_a_decision_whose_worker_died_after_recording_its_round_is_carried_out(
    nats_url: str,
    prefix: str,
    tmp_path: Path,
    worker_process: Callable[..., WorkerProcess],
    dies_after: str,
) -> None:
    # Given a worker that dies right after a decision recorded its round (its steps, or the
    # run's end), before publishing the steps (or writing the result)
    # When another worker gets the decision's message again (nothing new in the journal)
    fault = {"TASKQ_TEST_DIE_AFTER_ROUND": dies_after}
    run, starts = await taken_over_after(nats_url, prefix, tmp_path, worker_process, fault, 2)
    # Then it carries the recorded round out: the run goes on and ends, each step ran once
    assert await run.result(timeout=30) == 1
    assert starts == [f"start {run.id}.0 1", f"start {run.id}.1 1"]
    await journaled.app.aclose()
