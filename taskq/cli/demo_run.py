"""`taskq demo`: the whole engine on the embedded defaults, in one command.

Starts a real nats-server (temporary store), a worker in this process, enqueues a few
tasks (one that retries, one that ends in the dead-letter queue), a Spark job task and a
Spark batch task on a local SparkSession, plus a burst of no-op tasks, waits for every one
to settle, runs one durable workflow (two steps around a durable timer), and prints a
summary.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import click

from taskq.app import App
from taskq.errors import TaskqError
from taskq.server import EmbeddedServer
from taskq.workflows.workflow import Workflow

DEADLINE = 180.0
DASHBOARD_PORT = 8787
SPARK_ITEMS = 1000
ORDER = "A-1002"  # the demo workflow's order


def build_app(
    url: str, prefix: str = "demo", spark: bool = False, spark_master: str = "local[2]"
) -> App:
    """The demo's tasks: one async, one sync, one flaky, one doomed, one no-op; a durable
    workflow and its two steps; and with `spark`, a Spark job task and a Spark batch task
    (on `spark_master`: a local session or a Spark Connect URL)."""
    app = App(url=url, prefix=prefix, spark_master=spark_master)
    if spark:
        _spark_tasks(app)
    _workflow(app)
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


def _spark_tasks(app: App) -> None:
    @app.task(executor="spark", timeout=300)
    def sum_of_range(spark: Any, n: int) -> int:  # one Spark job, run from the worker
        return int(spark.range(n).selectExpr("sum(id) AS s").first()["s"])

    @app.batch_task(batch_size=500, max_wait=1.0)
    def word_score(word: str) -> int:  # one item; a batch of them is one Spark job
        return sum(ord(c) - 96 for c in word.lower() if c.isalpha())


def _workflow(app: App) -> None:
    @app.task
    async def reserve(order: str) -> str:
        return f"box-{sum(map(ord, order)) % 90 + 10}"

    @app.task
    async def ship(order: str, box: str) -> str:
        return f"{order} shipped in {box}"

    @app.workflow
    async def fulfil(wf: Workflow, order: str) -> str:
        box = await wf.run(reserve, order)  # a step: journaled, never run again once done
        await wf.sleep(1.0)  # a durable timer, held on the server (no worker waits)
        return str(await wf.run(ship, order, box))


def spark_problem(master: str = "local[2]") -> str | None:
    """Why Spark cannot run here on `master` (no pyspark, no Java 17+, no Connect client),
    or None."""
    from taskq.settings import Settings
    from taskq.workers.spark.session import SparkRuntime

    try:
        SparkRuntime(Settings(spark_master=master)).check()
    except TaskqError as exc:
        return str(exc)
    return None


def run_demo(
    burst: int, spark: bool = True, dashboard: int | None = None, spark_master: str = "local[2]"
) -> int:
    """Run the demo; returns the process exit code. With `dashboard` (a port), the system
    keeps running afterwards, served by `taskq dashboard` on that port, until Ctrl-C."""
    logging.getLogger("taskq").setLevel(logging.CRITICAL)
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    problem = spark_problem(spark_master) if spark else "--no-spark"
    click.echo("taskq demo: starting an embedded nats-server ...")
    # the demo's data ends with it: each run left a 2 MB store in the temporary folder
    with (
        tempfile.TemporaryDirectory(prefix="taskq-demo-") as store,
        EmbeddedServer(store_dir=store) as server,
    ):
        click.echo(f"  server   {server.url} (store {store})")
        if problem is not None:
            click.echo(f"  spark    skipped: {problem}")
        app = build_app(server.url, spark=problem is None, spark_master=spark_master)
        try:
            return asyncio.run(_demo(app, burst, dashboard))
        except TaskqError as exc:
            click.echo(f"taskq demo failed: {exc}", err=True)
            return 1


async def _demo(app: App, burst: int, dashboard: int | None) -> int:
    from taskq.workers import Worker

    worker = Worker(app, concurrency=32)
    running = asyncio.create_task(worker.run())
    await worker.wait_ready()
    click.echo("  worker   started in this process (concurrency 32)")
    try:
        ok = await _tasks(app, worker, burst)
        if dashboard is not None:
            await _live_dashboard(app, dashboard)
        else:
            _dashboard_hint()
    finally:
        worker.stop()
        await running
        await app.aclose()
    return 0 if ok else 1


async def _tasks(app: App, worker: Any, burst: int) -> bool:
    """Every stage of the demo, then the summary; whether everything settled in time."""
    ok = await _first_tasks(app, worker)
    spark_line = await _spark_stage(app, worker) if "word_score" in app.tasks else None
    ok = ok and spark_line is not False
    before, started = worker.stats["succeeded"], time.perf_counter()
    for _ in range(burst):
        await app.tasks["noop"].enqueue()
    enqueue_s = time.perf_counter() - started
    ok = ok and await _wait(lambda: worker.stats["succeeded"] >= before + burst)
    drain_s = time.perf_counter() - started
    counted = Counter(worker.stats)  # the tasks above; the workflow's are told on their own
    flow = await _workflow_stage(app)
    ok = ok and flow is not None
    dead = await _dead_letters(app)
    from taskq.cli.queues import table
    from taskq.operate.queue_stats import snapshot

    queues = table(await snapshot(app, None, 0))
    line = spark_line if isinstance(spark_line, str) else None
    _summary(counted, dead, burst, enqueue_s, drain_s, line, flow)
    click.echo("")
    click.echo("queues (taskq queues)")
    click.echo(queues)
    return ok


def _dashboard_hint() -> None:
    from taskq.cli.dashboard import installed

    if installed():
        click.echo("")
        click.echo(
            "dashboard: `taskq demo --dashboard` keeps this system running and serves it at "
            f"http://127.0.0.1:{DASHBOARD_PORT}/ (or run `taskq dashboard` beside your own)"
        )


async def _live_dashboard(app: App, port: int) -> None:
    """Serve the dashboard over this demo's server until Ctrl-C, with a trickle of tasks
    (now and then one that dies) so that its pages move."""
    from taskq.dashboard.config import DashboardConfig
    from taskq.dashboard.serve import address, listen, serve

    client = await app.client()
    sock = listen("127.0.0.1", port)
    click.echo("")
    click.echo(
        f"dashboard  {address(sock, '127.0.0.1')}  (the demo keeps running: Ctrl-C stops it)"
    )
    settings = client.settings
    click.echo(f"workflows  taskq --url {settings.url} --prefix {settings.prefix} workflows ls")
    trickle = asyncio.create_task(_trickle(app))
    try:
        await serve(DashboardConfig(client.settings, port=port), client, sock)
    finally:
        trickle.cancel()
        sock.close()


async def _trickle(app: App) -> None:
    n = 0
    while True:
        n += 1
        await app.tasks["square"].enqueue(n % 10)
        if n % 30 == 0:
            await app.tasks["doomed"].enqueue(f"A-{1000 + n}")
        await asyncio.sleep(0.5)


async def _first_tasks(app: App, worker: Any) -> bool:
    """One that succeeds, one in a thread, one that retries, one that dies."""
    tasks = app.tasks
    await tasks["add"].enqueue(2, 3)
    await tasks["square"].enqueue(1.5)
    await tasks["flaky"].enqueue(7)
    await tasks["doomed"].enqueue("A-1001")
    click.echo("  enqueued add(2, 3), square(1.5), flaky(7), doomed('A-1001')")
    return await _wait(lambda: worker.stats["succeeded"] >= 3 and worker.stats["dead"] >= 1)


async def _spark_stage(app: App, worker: Any) -> str | bool:
    """Run the Spark tasks; the summary line, or False if they did not settle in time."""
    from taskq.workers.spark.connect import shown

    master = app.settings.spark_master
    local = master.startswith("local")
    where = "a local SparkSession" if local else f"Spark Connect {shown(master)}"
    click.echo(
        f"  spark    on {where}: sum_of_range(1,000,000) and {SPARK_ITEMS:,} word_score items ..."
    )
    before = worker.stats["succeeded"]
    started = time.perf_counter()
    job = await app.tasks["sum_of_range"].enqueue(1_000_000)
    words = [f"item{'abcdefghij'[i % 10]}{i}" for i in range(SPARK_ITEMS)]
    scores = await app.tasks["word_score"].enqueue_many(words)
    if not await _wait(lambda: worker.stats["succeeded"] >= before + 1 + SPARK_ITEMS):
        return False
    total = await job.result(timeout=10)
    first = await scores[0].result(timeout=10)
    took = time.perf_counter() - started
    return (
        f"  spark          sum_of_range(1,000,000) = {total:,} (one Spark job)\n"
        f"                 {SPARK_ITEMS:,} word_score items run in Spark batches, each settled "
        f"on its own (word_score({words[0]!r}) = {first})\n"
        f"                 {took:.1f}s, the SparkSession's start included"
    )


async def _workflow_stage(app: App) -> list[str] | None:
    """One durable workflow run, start to end; the summary's lines about it (its steps as
    `taskq workflows show` tells them), or None if it did not succeed in time."""
    from taskq.workflows.views import show_run

    started = time.perf_counter()
    run = await app.workflows["fulfil"].start(ORDER)
    click.echo(f"  workflow fulfil({ORDER!r}) started as run {run.id}: reserve, sleep 1 s, ship")
    try:
        value = await run.result(timeout=DEADLINE)
    except TaskqError as exc:
        click.echo(f"  workflow run {run.id} did not succeed: {exc}", err=True)
        return None
    took = time.perf_counter() - started
    view = await show_run(await app.client(), run.id)
    lines = [
        f"  workflow       fulfil({ORDER!r}) {view.summary.state} in {took:.1f}s: {value!r}",
        f"                 run {run.id}, as `taskq workflows show` tells it:",
    ]
    lines += [
        f"                 {step.n:>4}  {step.kind:5}  {step.target:8}  {step.state}"
        for step in view.steps
    ]
    lines.append("                 (its steps and decisions ran as tasks too, not counted above)")
    return lines


async def _wait(done: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not done():
        if time.monotonic() > deadline:
            click.echo("  timed out waiting for tasks to settle", err=True)
            return False
        await asyncio.sleep(0.05)
    return True


async def _dead_letters(app: App) -> list[dict[str, Any]]:
    from taskq.dlq.browse import list_dead

    return [r.model_dump() for r in await list_dead(app)]


def _summary(
    stats: Any,
    dead: list[dict[str, Any]],
    burst: int,
    enqueue_s: float,
    drain_s: float,
    spark: str | None,
    flow: list[str] | None = None,
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
    if spark:
        click.echo(spark)
    for line in flow or []:
        click.echo(line)
    click.echo("")
    click.echo(
        "Next: `taskq server` in one shell, `taskq worker examples.quickstart:app` in another,"
    )
    click.echo("then `taskq enqueue examples.quickstart:app add '[1, 2]'`.")
