"""Pausing, resuming and purging a queue (`taskq queues pause|resume|purge`, `App.pause_queue`
and friends), against a real server: the pause is the server's consumer pause (ADR-48)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pty
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from taskq import App
from taskq.errors import UnknownQueue
from taskq.operate.queue_control import FOREVER
from taskq.operate.queue_stats import queue_stats
from taskq.records.schedules import list_schedules
from tests.conftest import ROOT, cli_argv, run_cli, running_worker, wait_until

QUIET = 1.0  # how long "nothing is delivered" is watched: several fetch cycles of 0.2 s


async def test_pause_stops_delivery_across_two_workers_and_resume_restarts_it(
    app: App, nats_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Given two workers on a queue and a task running, when the queue is paused, the running
    task finishes, new tasks wait (the workers stay quiet), and resume delivers them."""
    ran: list[tuple[int, float]] = []
    release = asyncio.Event()

    @app.task
    async def job(n: int) -> None:
        ran.append((n, time.monotonic()))
        if n == 0:
            await release.wait()

    other = App(url=nats_url, prefix=prefix)
    other.task(name="job")(job.fn)
    async with running_worker(app) as one, running_worker(other) as two:
        await job.enqueue(0)
        await wait_until(lambda: len(ran) == 1)
        started = time.monotonic()
        state = await app.pause_queue("default")
        pause_latency = time.monotonic() - started
        assert state.paused and state.until is None and state.streams == 1
        with caplog.at_level(logging.WARNING, logger="taskq"):
            handles = [await job.enqueue(n) for n in range(1, 11)]  # enqueue still works
            release.set()
            await wait_until(lambda: one.stats["succeeded"] + two.stats["succeeded"] == 1)
            await asyncio.sleep(QUIET)  # watch a window in which nothing may arrive
            assert len(ran) == 1 and (await queue_stats(app, "default")).waiting == 10
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        resumed = time.monotonic()
        assert not (await app.resume_queue("default")).paused
        await wait_until(lambda: len(ran) == 11)
        first = min(t for n, t in ran if n > 0) - resumed
        assert await handles[-1].result(timeout=10) is None
    await other.aclose()
    assert one.stats["succeeded"] > 0 and two.stats["succeeded"] > 0
    # how soon: printed, not bounded (bench/control.py measures pause and resume)
    print(f"pause request {pause_latency * 1000:.1f} ms; resume -> first delivery {first:.3f} s")


async def test_a_pause_for_a_while_ends_by_itself(app: App) -> None:
    ran: list[datetime] = []

    @app.task
    async def job() -> None:
        ran.append(datetime.now(UTC))

    async with running_worker(app, fetch_timeout=2.5):
        await job.enqueue()
        await wait_until(lambda: len(ran) == 1)
        asked = datetime.now(UTC)
        state = await app.pause_queue("default", for_=timedelta(seconds=0.6))
        assert state.paused and state.until is not None
        assert state.until - datetime.now(UTC) < timedelta(seconds=0.7)
        await job.enqueue()
        await wait_until(lambda: len(ran) == 2)  # the pause ended by itself
    # held while paused: the task enqueued meanwhile ran only once the pause was over
    assert ran[1] >= state.until
    # the server wakes waiting pulls when a pause expires, well before the 2.5 s fetch
    # timeout: how soon is printed, not bounded (a busy machine delays any wake-up)
    print(f"paused 0.6 s; the waiting task ran {(ran[1] - asked).total_seconds():.3f} s after")
    assert not (await queue_stats(app, "default")).paused


async def test_a_worker_starting_on_a_paused_queue_does_not_resume_it(
    app: App, nats_url: str, prefix: str
) -> None:
    """Pausing before any worker ran creates the consumer paused; a worker then starting
    (which updates the consumer's config) leaves the pause in place."""
    ran: list[int] = []

    @app.task(ack_wait=7)
    async def job(n: int) -> None:
        ran.append(n)

    await job.enqueue(1)  # the stream exists, no consumer yet
    out = run_cli(nats_url, prefix, "queues", "pause", "default", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "queue": "default",
        "paused": True,
        "paused_until": None,
        "streams": 1,
    }
    async with running_worker(app, fetch_timeout=0.2) as worker:
        await job.enqueue(2)
        await asyncio.sleep(QUIET)  # watch a window in which nothing may arrive
        assert ran == [] and worker.stats["succeeded"] == 0
        client = await app.client()
        consumer = await client.connection.streams.consumer_state(
            app.names.queue_stream("default"), "default"
        )
        assert consumer.paused and consumer.ack_wait == 7  # the worker's config, still paused
        await app.resume_queue("default")
        await wait_until(lambda: sorted(ran) == [1, 2])


async def test_queues_shows_paused_and_until(app: App, nats_url: str, prefix: str) -> None:
    @app.task(queue="mail")
    async def send() -> None: ...

    await send.enqueue()
    out = run_cli(nats_url, prefix, "queues", "pause", "mail", "--for", "2h", "--json")
    assert out.returncode == 0, out.stderr
    until = datetime.fromisoformat(json.loads(out.stdout)["paused_until"])
    assert abs(until - datetime.now(UTC) - timedelta(hours=2)) < timedelta(seconds=30)
    await send.enqueue()  # enqueue works while paused
    listed = run_cli(nats_url, prefix, "queues", "--json", "--interval", "0")
    [stats] = json.loads(listed.stdout)
    assert stats["paused"] is True and stats["waiting"] == 2
    assert datetime.fromisoformat(stats["paused_until"]) == until.replace(
        microsecond=until.microsecond // 1000 * 1000
    )
    table = run_cli(nats_url, prefix, "queues", "ls", "--interval", "0").stdout
    assert "PAUSED" in table and "until " in table.splitlines()[1]
    out = run_cli(nats_url, prefix, "queues", "resume", "mail")
    assert out.returncode == 0 and out.stdout.strip() == "mail: running"
    [stats] = json.loads(run_cli(nats_url, prefix, "queues", "--json", "--interval", "0").stdout)
    assert stats["paused"] is False and stats["paused_until"] is None


async def test_a_partitioned_queue_pauses_and_purges_as_one(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task(queue="work", partitions=3)
    async def a(n: int) -> None: ...

    @app.task(queue="work")
    async def b(n: int) -> None: ...

    # a delayed task, which a worker keeps as a schedule: purges leave it
    await b.options(countdown=3600).enqueue(99)
    async with running_worker(app, queues=["work"]):
        await wait_until(lambda: list_schedules(app, ["work"]), timeout=20)
    await a.enqueue_many(range(7))
    await b.enqueue_many(range(5))
    state = await app.pause_queue("work", until=datetime.now(UTC) + timedelta(minutes=5))
    assert state.paused and state.streams == 3
    client = await app.client()
    for part in range(3):
        consumer = await client.connection.streams.consumer_state(
            app.names.queue_stream("work", part), "work"
        )
        assert consumer.paused and consumer.pause_until == state.until
    out = run_cli(nats_url, prefix, "queues", "purge", "work", "--task", "a", "--yes", "--json")
    assert json.loads(out.stdout) == {"queue": "work", "task": "a", "purged": 7}
    assert (await queue_stats(app, "work")).per_task == {"b": 5}
    out = run_cli(nats_url, prefix, "queues", "purge", "work", "--yes")
    assert out.returncode == 0 and out.stdout.strip() == "purged 5 task(s) of queue 'work'"
    assert await app.purge_queue("work") == 0
    assert len(json.loads(run_cli(nats_url, prefix, "schedules", "ls", "--json").stdout)) == 1
    assert not (await app.resume_queue("work")).paused


async def test_purge_asks_at_a_terminal_and_refuses_without_one(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task
    async def job() -> None: ...

    await job.enqueue_many([()] * 3)
    refused = run_cli(nats_url, prefix, "queues", "purge", "default")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    declined = _at_terminal(nats_url, prefix, "n\n", "queues", "purge", "default")
    assert "remove the 3 stored task(s) of queue 'default'?" in declined
    assert await app.purge_queue("default", task="job") == 3


def _at_terminal(url: str, prefix: str, answer: str, *args: str) -> str:
    """Run the CLI with a pseudo-terminal on stdin, answer its question; its stdout."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            cli_argv(url, prefix, *args),
            cwd=ROOT,
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.write(controller, answer.encode())
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(controller)
        os.close(terminal)
    assert proc.returncode == 1 and err.decode().strip() == "taskq: aborted"  # declined
    return out.decode()


async def test_an_unknown_queue_is_a_one_line_usage_error(
    app: App, nats_url: str, prefix: str
) -> None:
    for args in (("pause", "nope"), ("resume", "nope"), ("purge", "nope", "--yes")):
        out = run_cli(nats_url, prefix, "queues", *args)
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().splitlines() == [
            f"taskq queues {args[0]}: Invalid value for QUEUE: no queue 'nope' on the server"
        ]
    with pytest.raises(UnknownQueue):
        await app.pause_queue("nope")
    bad = run_cli(nats_url, prefix, "queues", "pause", "x", "--for", "soon")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_pause_is_for_a_while_until_a_time_or_until_resumed() -> None:
    from taskq.errors import ConfigError
    from taskq.operate.queue_control import pause_deadline

    assert pause_deadline() == FOREVER
    soon = pause_deadline(for_=90) - datetime.now(UTC)
    assert timedelta(seconds=89) < soon <= timedelta(seconds=90)
    later = datetime(2100, 1, 1)  # naive: UTC, as for eta=
    assert pause_deadline(until=later) == later.replace(tzinfo=UTC)
    for bad in ({"for_": 0}, {"until": datetime(2000, 1, 1)}, {"for_": 1, "until": later}):
        with pytest.raises(ConfigError):
            pause_deadline(**bad)
