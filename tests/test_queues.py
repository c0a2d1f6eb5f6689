"""`taskq queues`: waiting, in flight, per task, dead letters, throughput."""

from __future__ import annotations

import asyncio
import json

from taskq import App, Reject
from taskq.operate.queue_stats import snapshot
from tests.conftest import run_cli, running_worker, wait_until


async def test_queues_reports_waiting_per_task_and_dead(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task
    async def a() -> None: ...

    @app.task(queue="emails")
    async def b() -> None: ...

    @app.task(max_retries=0)
    async def bad() -> None:
        raise Reject("no")

    async with running_worker(app, queues=["default"]) as worker:
        await bad.enqueue()
        await wait_until(lambda: worker.stats["dead"] == 1)
    await a.enqueue_many(range(0))
    for _ in range(3):
        await a.enqueue()
    await b.enqueue()
    # fresh: one ordinary command through the real interpreter (`python -m taskq`)
    out = run_cli(nats_url, prefix, "queues", "--json", "--interval", "0", fresh=True)
    assert out.returncode == 0, out.stderr
    stats = {s["queue"]: s for s in json.loads(out.stdout)}
    assert set(stats) == {"default", "emails"}
    assert stats["default"]["waiting"] == 3 and stats["default"]["per_task"] == {"a": 3}
    assert stats["default"]["dead"] == 1 and stats["default"]["in_flight"] == 0
    assert stats["emails"]["waiting"] == 1 and stats["emails"]["per_task"] == {"b": 1}
    table = run_cli(nats_url, prefix, "queues", "--interval", "0").stdout
    assert "WAITING" in table and "a=3" in table


async def test_queues_throughput_over_an_interval(app: App) -> None:
    @app.task
    async def tick(i: int) -> None: ...

    async with running_worker(app):
        import asyncio

        async def produce() -> None:
            for i in range(300):
                await tick.enqueue(i)

        producing = asyncio.create_task(produce())
        stats = await snapshot(app, ["default"], 0.5)
        await producing
    assert stats[0].enqueued_per_s > 0 and stats[0].settled_per_s > 0


async def test_the_stream_listing_reads_every_page(app: App) -> None:
    """The server lists 256 streams per page: an account with more is read page by page
    (queues, schedules and task lookups all start from this listing)."""
    from taskq.topology.specs import queue_stream

    connection = (await app.client()).connection
    names = [queue_stream(app.names, app.settings, f"page{i}") for i in range(260)]
    await asyncio.gather(*(connection.streams.ensure(spec) for spec in names))
    try:
        listed = await connection.streams.listing()
        assert {spec.name for spec in names} <= set(listed)
    finally:
        await asyncio.gather(*(connection.streams.delete(spec.name) for spec in names))


async def test_runnable_is_what_a_new_worker_could_start_now(
    app: App, nats_url: str, prefix: str
) -> None:
    """The autoscaling signal: tasks waiting count; a retry waiting out its delay, a task
    scheduled for later and a paused queue's tasks do not (KEDA's NATS scaler counts the
    first two as load)."""

    @app.task(max_retries=2, backoff=3600, jitter=0)
    async def later() -> None:
        raise RuntimeError("retried in an hour")

    @app.task
    async def plain() -> None: ...

    async with running_worker(app) as worker:
        await later.enqueue()
        await plain.options(countdown=3600).enqueue()  # held by the worker as a schedule
        await wait_until(lambda: worker.stats["retried"] == 1 and worker.stats["held"] == 1)
    for _ in range(3):
        await plain.enqueue()
    (stats,) = await snapshot(app, ["default"], 0)
    assert (stats.runnable, stats.runnable_by_partition) == (3, {"none": 3})
    await app.pause_queue("default")
    out = run_cli(nats_url, prefix, "queues", "--json", "--interval", "0")
    (shown,) = [q for q in json.loads(out.stdout) if q["queue"] == "default"]
    assert (shown["waiting"], shown["runnable"], shown["paused"]) == (3, 0, True)
    header, row = run_cli(nats_url, prefix, "queues", "--interval", "0").stdout.splitlines()[:2]
    assert (_cell(header, row, "WAITING"), _cell(header, row, "RUNNABLE")) == ("3", "0"), row


def _cell(header: str, row: str, column: str) -> str:
    """A right-aligned column's cell of a `taskq queues` row."""
    end = header.index(column) + len(column)
    return row[end - 8 : end].strip()
