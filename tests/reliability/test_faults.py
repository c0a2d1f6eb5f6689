"""Fault injection: worker kills, server restarts and rolling deploys lose nothing.

Every test ends with an accounting (succeeded + dead-lettered = enqueued; lost = 0) and
prints it. Default runs are short; `-m soak` runs the long versions.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from taskq import App
from taskq.ports import lease_port
from taskq.server import EmbeddedServer
from tests.apps import deploys, reliable
from tests.conftest import WorkerProcess, wait_until
from tests.reliability.ledger import account, all_done

SPEC = "tests.apps.reliable:app"


def producer(url: str, prefix: str) -> App:
    """The reliable app pointed at this test's server and prefix (as `--url/--prefix` do)."""
    reliable.app.configure(url=url, prefix=prefix)
    return reliable.app


async def enqueue_mixed(count: int, long_share: float = 0.1) -> list[str]:
    """`count` tasks: mostly short, some longer than ack_wait (1 s)."""
    rng = random.Random(7)
    ids = [f"t{i:05d}" for i in range(count)]
    items = []
    for tid in ids:
        seconds = 1.5 if rng.random() < long_share else rng.choice((0.0, 0.01, 0.05, 0.2))
        items.append({"tid": tid, "seconds": seconds})
    half = len(items) // 2
    await reliable.work.enqueue_many(items[:half])
    await reliable.awork.enqueue_many(items[half:])
    return ids


async def run_worker_kills(
    url: str,
    prefix: str,
    tmp_path: Path,
    start: Callable[..., WorkerProcess],
    *,
    tasks: int,
    workers: int,
    kills: int,
    every: float,
) -> None:
    ledger = tmp_path / "ledger.txt"
    env = {"TASKQ_TEST_LEDGER": str(ledger)}
    app = producer(url, prefix)
    procs = [start(SPEC, "-c", "8", env=env) for _ in range(workers)]
    for proc in procs:
        await proc.wait_ready()
    ids = await enqueue_mixed(tasks)
    rng = random.Random(11)
    for _ in range(kills):
        await asyncio.sleep(every)
        victim = rng.randrange(workers)
        procs[victim].kill()  # SIGKILL, mid-task more often than not
        procs[victim] = start(SPEC, "-c", "8", env=env)
        await procs[victim].wait_ready()
    await wait_until(lambda: all_done(ledger, ids), timeout=60 + tasks / 20)
    result = await account(app, ids, ledger)
    print(result.line("worker kills", kills))
    assert result.lost == 0 and result.succeeded == tasks, result
    await app.aclose()


@pytest.mark.heavy
async def test_worker_kills_lose_nothing(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    await run_worker_kills(
        nats_url, prefix, tmp_path, worker_process, tasks=300, workers=2, kills=3, every=1.5
    )


@pytest.mark.soak
@pytest.mark.timeout(600)
async def test_worker_kills_soak(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    await run_worker_kills(
        nats_url, prefix, tmp_path, worker_process, tasks=2000, workers=3, kills=25, every=2.5
    )


async def run_server_restart(
    tmp_path: Path, start_worker: Callable[..., WorkerProcess], *, tasks: int, restarts: int
) -> None:
    port = lease_port()
    store = tmp_path / "store"
    server = EmbeddedServer(port=port, store_dir=store).start()
    ledger = tmp_path / "ledger.txt"
    prefix = "r" + str(port)
    url = server.url
    app = producer(url, prefix)
    workers = [start_worker(url, prefix, env={"TASKQ_TEST_LEDGER": str(ledger)}) for _ in range(2)]
    try:
        for proc in workers:
            await proc.wait_ready()
        ids = [f"s{i:05d}" for i in range(tasks)]
        published = 0

        async def produce() -> None:
            nonlocal published
            for tid in ids:  # one by one: some publishes straddle the outage and retry
                await reliable.awork.enqueue(tid, 0.01)
                published += 1

        producing = asyncio.create_task(produce())
        for round_ in range(restarts):
            await wait_until(
                lambda r=round_: published >= (r + 1) * tasks // (restarts + 1), timeout=60
            )
            server.kill()  # SIGKILL the server mid-run
            await asyncio.sleep(1.0)
            server = EmbeddedServer(port=port, store_dir=store).start()
        await asyncio.wait_for(producing, timeout=120)
        await wait_until(lambda: all_done(ledger, ids), timeout=120)
        result = await account(app, ids, ledger)
        print(result.line("server restart", restarts))
        broker = (await app.client()).connection
        stored = await broker.streams.state(app.names.queue_stream("default"))
        assert result.lost == 0, result
        assert stored.last_seq == tasks  # publish retries were deduplicated: none stored twice
    finally:
        await app.aclose()
        for proc in workers:
            proc.close()
        server.stop()


async def test_server_restart_loses_nothing(tmp_path: Path) -> None:
    await run_server_restart(tmp_path, _spawn, tasks=400, restarts=1)


@pytest.mark.soak
@pytest.mark.timeout(600)
async def test_server_restart_soak(tmp_path: Path) -> None:
    await run_server_restart(tmp_path, _spawn, tasks=3000, restarts=4)


def _spawn(url: str, prefix: str, env: dict[str, str]) -> WorkerProcess:
    return WorkerProcess(url, prefix, SPEC, "-c", "8", env=env)


async def run_rolling_deploy(
    url: str,
    prefix: str,
    tmp_path: Path,
    start: Callable[..., WorkerProcess],
    *,
    tasks: int,
    rounds: int,
) -> None:
    ledger = tmp_path / "ledger.txt"
    env = {"TASKQ_TEST_LEDGER": str(ledger)}
    deploys.app.configure(url=url, prefix=prefix)
    app = deploys.app
    deploy = ("tests.apps.deploys:app", "-c", "8")  # a lease as long as production's
    procs = [start(*deploy, env=env) for _ in range(2)]
    for proc in procs:
        await proc.wait_ready()
    ids = [f"d{i:05d}" for i in range(tasks)]

    async def produce() -> None:
        for chunk in range(0, tasks, 50):  # a steady flow while workers restart
            await deploys.work.enqueue_many(
                [{"tid": tid, "seconds": 0.02} for tid in ids[chunk : chunk + 50]]
            )
            await asyncio.sleep(0.05)

    producing = asyncio.create_task(produce())
    for _ in range(rounds):
        for i, proc in enumerate(procs):
            proc.signal(signal.SIGTERM)
            assert await proc.wait_exit(60) == 0, proc.output()
            procs[i] = start(*deploy, env=env)
            await procs[i].wait_ready()
    await producing
    await wait_until(lambda: all_done(ledger, ids), timeout=120)
    result = await account(app, ids, ledger)
    print(result.line("rolling deploy", rounds * 2))
    assert result.lost == 0 and result.duplicates == 0, result
    await app.aclose()


@pytest.mark.heavy
async def test_rolling_deploy_loses_nothing_runs_nothing_twice(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    await run_rolling_deploy(nats_url, prefix, tmp_path, worker_process, tasks=400, rounds=1)


@pytest.mark.soak
@pytest.mark.timeout(600)
async def test_rolling_deploy_soak(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    await run_rolling_deploy(nats_url, prefix, tmp_path, worker_process, tasks=1000, rounds=3)


async def test_long_tasks_beside_short_ones_never_run_twice(app: App) -> None:
    from tests.conftest import running_worker

    runs: dict[str, int] = {}

    @app.task(ack_wait=0.3)
    async def job(tid: str, seconds: float) -> None:
        runs[tid] = runs.get(tid, 0) + 1
        await asyncio.sleep(seconds)

    @app.task(ack_wait=0.3)
    def sync_job(tid: str, seconds: float) -> None:
        runs[tid] = runs.get(tid, 0) + 1
        time.sleep(seconds)

    async with running_worker(app, concurrency=16) as worker:
        await job.enqueue_many([{"tid": f"long{i}", "seconds": 3.0} for i in range(3)])
        await sync_job.enqueue_many([{"tid": f"slong{i}", "seconds": 3.0} for i in range(2)])
        await job.enqueue_many([{"tid": f"short{i}", "seconds": 0.01} for i in range(200)])
        await wait_until(lambda: worker.stats["succeeded"] == 205, timeout=30)
        await asyncio.sleep(0.6)  # two ack_waits: a lost lease would show as a second run
    assert max(runs.values()) == 1 and len(runs) == 205
