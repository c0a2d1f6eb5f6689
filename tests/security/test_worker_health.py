"""A worker never dies quietly and never stalls: the finding was a worker whose connection
nats-py had closed for good (after the server refused a 5,000-character subject) that stayed
alive logging `ConnectionClosedError` every 0.5 s, listed by nobody, draining nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats

from taskq import App
from taskq.registry import list_workers
from taskq.server import EmbeddedServer
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
