"""`taskq worker` as a real process: SIGKILL mid-task and SIGTERM graceful shutdown."""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Callable
from pathlib import Path

from taskq import App
from tests.apps import ledger
from tests.conftest import WorkerProcess, wait_until

SPEC = "tests.apps.ledger:app"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_sigkill_mid_task_completes_on_another_worker(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    led = tmp_path / "ledger.txt"
    env = {"TASKQ_TEST_LEDGER": str(led)}
    app = producer(nats_url, prefix)
    first = worker_process(SPEC, "-c", "2", env=env)
    await first.wait_ready()
    await ledger.slow.enqueue("job-1", 2.0)
    await wait_until(lambda: any(line.startswith("start job-1") for line in lines(led)))
    first.kill()
    second = worker_process(SPEC, "-c", "2", env=env)
    await second.wait_ready()
    # redelivered once its lease (ack_wait 1 s) ran out, and run to the end (2 s)
    await wait_until(lambda: any(line.startswith("done job-1") for line in lines(led)), 30)
    starts = [line for line in lines(led) if line.startswith("start job-1")]
    dones = [line for line in lines(led) if line.startswith("done job-1")]
    assert len(starts) == 2 and len(dones) == 1, lines(led)
    assert starts[0].split()[-1] != starts[1].split()[-1]  # another process finished it
    await app.aclose()


def producer(url: str, prefix: str) -> App:
    """The ledger app pointed at this test's server and prefix (as `--url/--prefix` do)."""
    ledger.app.configure(url=url, prefix=prefix)
    return ledger.app


async def test_sigterm_lets_running_task_finish_and_exits_0(
    nats_url: str, prefix: str, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    led = tmp_path / "ledger.txt"
    app = producer(nats_url, prefix)
    proc = worker_process(SPEC, "-c", "2", env={"TASKQ_TEST_LEDGER": str(led)})
    await proc.wait_ready()
    await ledger.slow.enqueue("job-2", 1.5)
    await wait_until(lambda: any(line.startswith("start job-2") for line in lines(led)))
    proc.signal(signal.SIGTERM)
    code = await proc.wait_exit(30)
    assert code == 0, proc.output()
    assert any(line.startswith("done job-2") for line in lines(led)), proc.output()
    broker = (await app.client()).connection
    state = await broker.streams.state(app.names.queue_stream("default"))
    assert state.messages == 0  # acked before exit, nothing left to redeliver
    await app.aclose()


async def test_sigusr1_prints_where_the_worker_waits_and_it_goes_on(
    worker_process: Callable[..., WorkerProcess],
) -> None:
    proc = worker_process("tests.apps.ledger:app")
    await proc.wait_ready()
    proc.signal(signal.SIGUSR1)
    # then each task's chain of awaits, down to what it waits on: the main task's reaches
    # the worker's `run`, waiting for its stop (the dump is many writes: wait for that
    # line itself, not for the first task's, or the read may land mid-dump)
    main_task = re.compile(r"workers/worker\.py:\d+ in run\n")
    with contextlib.suppress(AssertionError):  # the assertion below says what came
        await wait_until(lambda: main_task.search(proc.output()), timeout=20)
    out = proc.output()
    assert "Current thread" in out or "Thread 0x" in out  # every thread's, first
    assert "awaiting:" in out and main_task.search(out), out
    assert proc.proc.poll() is None  # still running: a dump, not a stop
