"""`taskq demo`: the whole engine on the embedded defaults, in one command.

Starts a real nats-server (temporary store), a worker in this process, enqueues a few
tasks (one that retries, one that ends in the dead-letter queue) plus a burst of no-op
tasks, waits for every one to settle, and prints a summary.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Callable
from typing import Any

import click

from taskq.app import App
from taskq.errors import TaskqError
from taskq.server import EmbeddedServer

DEADLINE = 120.0


def build_app(url: str, prefix: str = "demo") -> App:
    """The demo's tasks: one async, one sync, one flaky, one doomed, one no-op."""
    app = App(url=url, prefix=prefix)
    flaky_calls: list[int] = []

    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    @app.task
    def square(x: float) -> float:  # a plain `def` task: runs in the worker's thread pool
        time.sleep(0.05)
        return x * x

    @app.task(max_retries=3, backoff=0.2, jitter=0.1)
    async def flaky(n: int) -> str:
        flaky_calls.append(n)
        if len(flaky_calls) < 3:
            raise ConnectionError(f"transient failure #{len(flaky_calls)}")
        return "third time lucky"

    @app.task(max_retries=1, backoff=0.2, jitter=0.1)
    async def doomed(order: str) -> None:
        raise ValueError(f"order {order} cannot be charged")

    @app.task
    async def noop() -> None:
        return None

    return app


def run_demo(burst: int) -> int:
    """Run the demo; returns the process exit code."""
    logging.getLogger("taskq").setLevel(logging.CRITICAL)
    store = tempfile.mkdtemp(prefix="taskq-demo-")
    click.echo("taskq demo: starting an embedded nats-server ...")
    with EmbeddedServer(store_dir=store) as server:
        click.echo(f"  server   {server.url} (store {store})")
        try:
            return asyncio.run(_demo(build_app(server.url), burst))
        except TaskqError as exc:
            click.echo(f"taskq demo failed: {exc}", err=True)
            return 1


async def _demo(app: App, burst: int) -> int:
    from workers import Worker

    worker = Worker(app, concurrency=32)
    running = asyncio.create_task(worker.run())
    await worker.wait_ready()
    click.echo("  worker   started in this process (concurrency 32)")
    tasks = app.tasks
    await tasks["add"].enqueue(2, 3)
    await tasks["square"].enqueue(1.5)
    await tasks["flaky"].enqueue(7)
    await tasks["doomed"].enqueue("A-1001")
    click.echo("  enqueued add(2, 3), square(1.5), flaky(7), doomed('A-1001')")
    ok = await _wait(lambda: worker.stats["succeeded"] >= 3 and worker.stats["dead"] >= 1)
    started = time.perf_counter()
    for _ in range(burst):
        await tasks["noop"].enqueue()
    enqueue_s = time.perf_counter() - started
    ok = ok and await _wait(lambda: worker.stats["succeeded"] >= 3 + burst)
    drain_s = time.perf_counter() - started
    dead = await _dead_letters(app)
    from taskq.commands.queues import table
    from taskq.queue_stats import snapshot

    queues = table(await snapshot(app, None, 0))
    worker.stop()
    await running
    await app.aclose()
    _summary(worker.stats, dead, burst, enqueue_s, drain_s)
    click.echo("")
    click.echo("queues (taskq queues)")
    click.echo(queues)
    return 0 if ok else 1


async def _wait(done: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not done():
        if time.monotonic() > deadline:
            click.echo("  timed out waiting for tasks to settle", err=True)
            return False
        await asyncio.sleep(0.05)
    return True


async def _dead_letters(app: App) -> list[dict[str, Any]]:
    from dlq.browse import list_dead

    return [r.model_dump() for r in await list_dead(app)]


def _summary(
    stats: Any, dead: list[dict[str, Any]], burst: int, enqueue_s: float, drain_s: float
) -> None:
    click.echo("")
    click.echo("summary")
    click.echo(f"  succeeded      {stats['succeeded']}")
    click.echo(f"  retried        {stats['retried']} (NAKed with a server-side delay)")
    click.echo(f"  dead-lettered  {stats['dead']}")
    for record in dead:
        error = record["error"]
        click.echo(
            f"    {record['message'].get('task')}: {record['reason']} after "
            f"{record['attempts']} attempts - {error['type']}: {error['message']}"
        )
    if burst:
        click.echo(
            f"  burst          {burst} no-op tasks: enqueued {burst / enqueue_s:,.0f}/s "
            f"(one at a time), enqueued+drained in {drain_s:.2f}s"
        )
    click.echo("")
    click.echo(
        "Next: `taskq server` in one shell, `taskq worker examples.quickstart:app` in another,"
    )
    click.echo("then `taskq enqueue examples.quickstart:app add '[1, 2]'`.")
