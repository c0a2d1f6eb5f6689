"""Tasks that never return and tasks that leak memory are contained."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

import pytest

from taskq import App
from taskq.errors import TaskFailed
from tests.apps import hang
from tests.conftest import WorkerProcess, running_worker, wait_until

RELEASE = threading.Event()  # lets the hung threads end when the test is over


async def test_a_hung_def_task_is_bounded_and_the_worker_keeps_its_concurrency(
    app: App,
) -> None:
    """Two `def` tasks stuck for good (ignoring cancellation, like C code) on a worker of
    concurrency 2: each fails its attempt with TaskTimeout at its timeout, is settled by
    its policy (dead after its one attempt), and two quick tasks still run side by side
    afterwards: the abandoned threads do not eat the worker's threads."""
    started: list[str] = []

    @app.task(timeout=0.3, max_retries=0)
    def stuck(n: int) -> None:
        started.append(f"stuck{n}")
        RELEASE.wait(10**6)  # like time.sleep(10**6): deaf to asyncio cancellation

    both = threading.Barrier(2, timeout=5)

    @app.task(timeout=5, max_retries=0)
    def pair(n: int) -> int:
        both.wait()  # passes only when two threads run at once: full concurrency
        return n

    try:
        async with running_worker(app, concurrency=2) as worker:
            hung = [await stuck.enqueue(n) for n in range(2)]
            for handle in hung:
                try:
                    await handle.result(timeout=10)
                    raise AssertionError("a hung task succeeded")
                except TaskFailed as exc:
                    assert exc.type == "TaskTimeout"
            await wait_until(lambda: worker.stats["dead"] == 2)
            quick = [await pair.enqueue(n) for n in range(2)]
            assert [await h.result(timeout=10) for h in quick] == [0, 1]
    finally:
        RELEASE.set()
    assert sorted(started) == ["stuck0", "stuck1"]


async def test_a_worker_process_with_a_hung_thread_still_exits_on_sigterm(
    nats_url: str, prefix: str, worker_process: Callable[..., WorkerProcess]
) -> None:
    """The abandoned thread must not keep the stopped process alive (the interpreter joins a
    ThreadPoolExecutor's threads at exit: it would wait for `time.sleep(10**6)`)."""
    hang.app.configure(url=nats_url, prefix=prefix)
    try:
        proc = worker_process("tests.apps.hang:app", "-c", "1")
        await proc.wait_ready()
        handle = await hang.hang.enqueue()
        with pytest.raises(TaskFailed) as failed:
            await handle.result(timeout=15)
        assert failed.value.type == "TaskTimeout"
        await wait_until(lambda: "left running" in proc.output(), timeout=10)
        proc.signal(signal.SIGTERM)
        assert await proc.wait_exit(timeout=15) == 0, proc.output()
    finally:
        await hang.app.aclose()
