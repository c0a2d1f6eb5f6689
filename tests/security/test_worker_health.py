"""A worker never dies quietly and never stalls: the finding was a worker whose connection
nats-py had closed for good (after the server refused a 5,000-character subject) that stayed
alive logging `ConnectionClosedError` every 0.5 s, listed by nobody, draining nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest

import taskq.workers.judge as judge_module
from taskq import App
from taskq.dlq.browse import get_dead
from taskq.errors import TaskFailed
from taskq.records.heartbeats import list_workers
from taskq.server import EmbeddedServer
from taskq.workers.job import Job
from taskq.workers.settle import Settler
from tests.conftest import WorkerProcess, running_worker, wait_until
from tests.proxy import Proxy


async def test_a_connection_closed_for_good_ends_the_worker_process_non_zero(
    nats_server: EmbeddedServer, prefix: str
) -> None:
    link = await Proxy(nats_server.port).start()
    worker = WorkerProcess(link.url, prefix, "tests.apps.ledger:app")
    try:
        await worker.wait_ready()
        # a protocol error from the server: nats-py closes the connection and never
        # reconnects (what the server's `maximum control line exceeded` did)
        await link.inject(b"-ERR 'Unknown Protocol Operation'\r\n")
        code = await worker.wait_exit(timeout=30)
        assert code == 1, worker.output()
        assert "lost the connection to NATS" in worker.output()
    finally:
        worker.close()
        await link.close()


async def test_a_failing_fetch_loop_shows_the_worker_unhealthy(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task(queue="jammed")
    async def work(n: int) -> None: ...

    async with running_worker(app, queues=["jammed"]):
        await wait_until(lambda: _healthy(app), timeout=20)
        # Given its queue's stream replaced by a foreign one of the same name, which
        # taskq refuses to take over: every fetch fails, and the worker cannot mend it
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream()
            stream = app.names.queue_stream("jammed")
            await js.delete_stream(stream)
            await js.add_stream(name=stream, subjects=[f"{prefix}.foreign.>"])
            # Then `taskq workers` says it is unhealthy, and why
            await wait_until(lambda: _problem(app), timeout=30)
            problem = await _problem(app)
            assert problem is not None and "queue jammed" in problem
        finally:
            await nc.close()


async def _healthy(app: App) -> bool:
    found = await list_workers(app)
    return bool(found) and found[0].problem is None


async def _problem(app: App) -> str | None:
    found = await list_workers(app)
    return found[0].problem if found else None


async def test_taskq_workers_prints_the_problem(
    app: App, nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The same from the CLI: STATUS and the reason (and `problem` in --json)."""
    from tests.conftest import run_cli

    @app.task(queue="jammed")
    async def work(n: int) -> None: ...

    async with running_worker(app, queues=["jammed"]):
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream()
            await js.delete_stream(app.names.queue_stream("jammed"))
            await js.add_stream(
                name=app.names.queue_stream("jammed"), subjects=[f"{prefix}.foreign.>"]
            )
            await wait_until(lambda: _problem(app), timeout=30)
        finally:
            await nc.close()
        table = await asyncio.to_thread(run_cli, nats_url, prefix, "workers")
        listed = await asyncio.to_thread(run_cli, nats_url, prefix, "workers", "--json")
    assert "unhealthy" in table.stdout and "fetching from queue jammed" in table.stdout
    assert json.loads(listed.stdout)[0]["problem"].startswith("fetching from queue jammed")


async def test_an_unexpected_error_judging_one_message_dead_letters_it_and_the_loop_goes_on(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's catch-all (workers/worker.py `_failed`): a non-taskq exception while
    judging one message (injected into a step the worker takes for every delivery, for
    that message only) dead-letters it as `crashed` with the traceback; it never runs,
    the tasks after it do, and the worker stays healthy."""
    ran: list[int] = []

    @app.task
    async def work(n: int) -> int:
        ran.append(n)
        return n

    doomed = {"doomed-1"}  # its id (`key`), known before it is enqueued
    real = judge_module.Judge._refused

    def refused(judge: Any, job: Job, *args: Any, **kwargs: Any) -> Any:
        if job.envelope is not None and job.envelope.id in doomed:
            raise RuntimeError(f"injected fault judging {job.envelope.id}")
        return real(judge, job, *args, **kwargs)

    monkeypatch.setattr(judge_module.Judge, "_refused", refused)
    async with running_worker(app) as worker:
        target = await work.options(key="doomed-1").enqueue(0)
        with pytest.raises(TaskFailed) as failed:
            await target.result(timeout=20)
        assert failed.value.reason == "crashed"
        # the result is recorded first, then the dead letter written: wait for it
        await wait_until(lambda: get_dead(app, target.id), timeout=20)
        letter = await get_dead(app, target.id)
        assert letter is not None and letter.reason == "crashed", letter
        assert letter.error.type == "RuntimeError"
        assert "RuntimeError: injected fault judging doomed-1" in letter.error.traceback
        assert "in refused" in letter.error.traceback  # the traceback of where it broke
        handles = [await work.enqueue(n) for n in (1, 2, 3)]
        assert [await h.result(timeout=20) for h in handles] == [1, 2, 3]
        stats = worker.stats  # counted after the ack (the TERM), once the records are stored
        await wait_until(lambda: stats["succeeded"] == 3 and stats["dead:crashed"] == 1)
        assert stats["dead"] == 1
        await wait_until(lambda: _healthy(app), timeout=20)
    assert ran == [1, 2, 3]  # the doomed one never ran


async def test_an_unexpected_error_settling_one_message_hands_it_back_to_run_again(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catch-all's other branch: an exception while settling (its verdict may be half
    written) hands the message back; it runs again later and succeeds, is never
    dead-lettered, and the tasks beside it run meanwhile."""
    ran: list[str] = []

    @app.task(ack_wait=600)  # not redelivered for want of an ack within the test: handed back
    async def work(name: str) -> str:
        ran.append(name)
        return name

    faults: list[str] = []
    real = Settler.settle

    async def settle(self: Settler, job: Job, decision: Any, outcome: Any) -> None:
        if job.envelope is not None and job.envelope.id == "unlucky" and not faults:
            faults.append(job.envelope.id)  # its first settle only
            raise RuntimeError("injected fault settling unlucky")
        await real(self, job, decision, outcome)

    monkeypatch.setattr(Settler, "settle", settle)
    async with running_worker(app) as worker:
        unlucky = await work.options(key="unlucky").enqueue("unlucky")
        others = [await work.enqueue(f"other-{n}") for n in (1, 2)]
        assert [await h.result(timeout=20) for h in others] == ["other-1", "other-2"]
        assert await unlucky.result(timeout=30) == "unlucky"  # its redelivery, settled
        assert faults == ["unlucky"]
        assert ran.count("unlucky") == 2  # it ran again after the failed settle
        assert await get_dead(app, "unlucky") is None
        counted = lambda: worker.stats["succeeded"] == 3  # noqa: E731 (counted after the ack)
        await wait_until(counted, timeout=20)
        assert worker.stats["dead"] == 0
        await wait_until(lambda: _healthy(app), timeout=20)
