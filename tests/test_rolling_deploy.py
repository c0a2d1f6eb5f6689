"""Rolling deploys and shared queues lose no task to the DLQ (issue 39, 1): a task its
worker's app does not declare comes back to its queue (held, no attempt spent) until a
worker that knows it takes it, for `unknown_task_grace` seconds; only then is it a dead
letter. A worker starting beside one that runs other tasks on a shared queue says so, and
`taskq enqueue --queue X` says when no worker consumes X."""

from __future__ import annotations

import signal
from collections.abc import Callable

from taskq.dlq.browse import list_dead
from taskq.records.results import fetch
from tests.apps import deploy_new
from tests.conftest import WorkerProcess, cli, wait_until


async def test_an_old_worker_leaves_a_new_task_for_the_new_worker(
    nats_url: str, prefix: str, worker_process: Callable[..., WorkerProcess]
) -> None:
    app = deploy_new.app
    app.configure(url=nats_url, prefix=prefix)
    try:
        # Given only a worker of the code before the deploy
        old = worker_process("tests.apps.deploy_old:app")
        await old.wait_ready()
        # When the new code enqueues its new task, and an old one
        new_tasks = [await deploy_new.welcome.enqueue(f"n{i}") for i in range(5)]
        old_task = await deploy_new.greet.enqueue("o")
        assert await old_task.result(timeout=30) == "hello o"
        await wait_until(lambda: old.output().count("no worker knows task") == 5, timeout=30)
        # Then nothing is dead while the new task waits; and the new worker runs it
        assert await list_dead(app) == []
        new = worker_process("tests.apps.deploy_new:app")
        await new.wait_ready()
        # and, as a rolling deploy goes on, the old worker stops: the new one runs them all
        old.signal(signal.SIGTERM)
        results = [await h.result(timeout=60) for h in new_tasks]
        assert results == [f"welcome n{i}" for i in range(5)]
        assert await list_dead(app) == []
        records = [await fetch(app, h.id) for h in new_tasks]
        assert [r.attempts for r in records if r is not None] == [1] * 5  # none spent waiting
        # and the new worker said it shares its queue with one running other tasks
        assert "runs other tasks" in new.output() and "deploy.welcome" in new.output()
    finally:
        await app.aclose()


async def test_a_task_no_worker_knows_is_a_dead_letter_after_its_grace(
    nats_url: str, prefix: str, worker_process: Callable[..., WorkerProcess]
) -> None:
    app = deploy_new.app
    app.configure(url=nats_url, prefix=prefix)
    try:
        old = worker_process("tests.apps.deploy_old:app", env={"TASKQ_UNKNOWN_TASK_GRACE": "1"})
        await old.wait_ready()
        await deploy_new.welcome.enqueue("late")

        async def lettered() -> bool:
            return bool(await list_dead(app))

        await wait_until(lettered, timeout=60)
        (letter,) = await list_dead(app)
        assert letter.reason == "unknown_task"
        assert letter.error.message == (
            "unknown task 'deploy.welcome': no worker of queue default knew it for 1 s"
        )
    finally:
        await app.aclose()


async def test_enqueue_to_a_queue_no_worker_consumes_warns(nats_url: str, prefix: str) -> None:
    told = await cli(
        nats_url,
        prefix,
        "enqueue",
        "tests.apps.deploy_new:app",
        "deploy.greet",
        '["x"]',
        "--queue",
        "nobody",
    )
    assert told.returncode == 0, told.stderr
    assert "no live worker consumes queue 'nobody'" in told.stderr
