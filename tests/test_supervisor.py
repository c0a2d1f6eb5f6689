"""`taskq worker -p N`: the supervisor restarts, stops, recycles and reloads worker processes.

Against a real nats-server. Every process a test starts (the supervisor, and each worker
process it names in its log) is killed by PID when the test ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import IO

import psutil
import pytest

from taskq import App
from taskq.nats import Connection
from tests.apps import hoard, ledger
from tests.conftest import ROOT, cli_argv, run_cli, wait_until

SPEC = "tests.apps.ledger:app"
STARTED = re.compile(r"started worker process (\d+) \(pid (\d+)\)")


class Supervised:
    """`taskq -v worker ARGS...` (a supervisor) in a subprocess, its output in `log`."""

    def __init__(
        self, url: str, prefix: str, args: tuple[str, ...], cwd: Path, env: dict[str, str]
    ) -> None:
        self.log = Path(env["TASKQ_TEST_LEDGER"]).with_name(f"supervisor-{os.urandom(3).hex()}")
        self._out: IO[bytes] = open(self.log, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cli_argv(url, prefix, "-v", "worker", *args),
            cwd=cwd,
            env={**os.environ, **env},
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def children(self) -> list[tuple[int, int]]:
        """(index, pid) of every worker process the supervisor said it started, in order."""
        return [(int(i), int(pid)) for i, pid in STARTED.findall(self.output())]

    def pid_of(self, index: int) -> int:
        return [pid for i, pid in self.children() if i == index][-1]

    async def wait_for(self, text: str, count: int = 1, timeout: float = 20.0) -> None:
        """Wait until `text` is in the log `count` times (fail at once if it exits)."""
        await wait_until(
            lambda: self.output().count(text) >= count or self.proc.poll() is not None, timeout
        )
        assert self.output().count(text) >= count, self.output()

    async def wait_exit(self, timeout: float = 30.0) -> int:
        await wait_until(lambda: self.proc.poll() is not None, timeout)
        return int(self.proc.returncode)

    def close(self) -> None:
        for pid in [self.proc.pid, *(pid for _, pid in self.children())]:
            if alive(pid):
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()
        self.proc.wait(10)
        self._out.close()


def alive(pid: int) -> bool:
    """True while `pid` is a running taskq process (not a zombie, not a reused PID)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and "taskq" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


@pytest.fixture
def supervise(nats_url: str, prefix: str, tmp_path: Path) -> Iterator[Callable[..., Supervised]]:
    started: list[Supervised] = []

    def start(*args: str, cwd: Path = ROOT) -> Supervised:
        env = {"TASKQ_TEST_LEDGER": str(tmp_path / "ledger.txt")}
        started.append(Supervised(nats_url, prefix, args, cwd, env))
        return started[-1]

    yield start
    for supervised in started:
        supervised.close()


@pytest.fixture
async def producer(nats_url: str, prefix: str) -> AsyncIterator[App]:
    """The ledger app pointed at this test's server and prefix (as `--url/--prefix` do)."""
    ledger.app.configure(url=nats_url, prefix=prefix)
    yield ledger.app
    await ledger.app.aclose()


def entries(path: Path, kind: str) -> list[tuple[str, int]]:
    """(token, pid) of each `kind` line ("start" or "done") in the ledger."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [(token, int(pid)) for k, token, pid in map(str.split, lines) if k == kind]


def runs(path: Path) -> Counter[str]:
    """How many times each token's task ran to the end."""
    return Counter(token for token, _ in entries(path, "done"))


async def queued(app: App) -> int:
    """Messages still in the default queue's stream (acked ones are gone: a work queue)."""
    connection: Connection = (await app.client()).connection
    return (await connection.streams.state(app.names.queue_stream("default"))).messages


async def test_a_killed_worker_process_is_restarted_and_the_backlog_completes(
    supervise: Callable[..., Supervised], producer: App, tmp_path: Path
) -> None:
    led = tmp_path / "ledger.txt"
    sup = supervise(SPEC, "-p", "2", "-c", "4")
    await sup.wait_for("worker ready", 2)
    tokens = {f"a{i}" for i in range(40)}
    await ledger.slow.enqueue_many([[token, 0.2] for token in sorted(tokens)])
    victim = sup.pid_of(2)
    await wait_until(lambda: any(pid == victim for _, pid in entries(led, "start")))

    os.kill(victim, signal.SIGKILL)

    await sup.wait_for(f"worker process 2 (pid {victim}) exited with signal SIGKILL; restarting")
    await sup.wait_for("worker ready", 3)  # the replacement is up
    assert sup.pid_of(2) != victim
    await wait_until(lambda: set(runs(led)) == tokens, 30)  # what it held ran elsewhere


async def test_sigterm_to_the_supervisor_drains_every_process_and_exits_0(
    supervise: Callable[..., Supervised], producer: App, tmp_path: Path
) -> None:
    led = tmp_path / "ledger.txt"
    sup = supervise(SPEC, "-p", "2", "-c", "2")
    await sup.wait_for("worker ready", 2)
    tokens = [f"b{i}" for i in range(30)]
    await ledger.slow.enqueue_many([[token, 0.3] for token in tokens])
    await wait_until(lambda: len(entries(led, "start")) >= 4)

    sup.proc.send_signal(signal.SIGTERM)

    assert await sup.wait_exit(30) == 0, sup.output()
    done = runs(led)
    assert max(done.values()) == 1, done  # none ran twice
    assert {token for token, _ in entries(led, "start")} == set(done)  # none was cut off
    assert await queued(producer) == len(tokens) - len(done)  # the rest wait: none lost
    assert sup.output().count("SIGTERM received: finishing running tasks") == 2


@pytest.mark.heavy
async def test_max_tasks_per_child_recycles_without_losing_or_repeating_a_task(
    supervise: Callable[..., Supervised], producer: App, tmp_path: Path
) -> None:
    led = tmp_path / "ledger.txt"
    sup = supervise(SPEC, "-p", "2", "-c", "4", "--max-tasks-per-child", "40")
    await sup.wait_for("worker ready", 2)
    tokens = {f"c{i}" for i in range(240)}  # ~6 recycles: each a new interpreter

    # 20 ms each, at most 8 at once: a few seconds, so recycled processes take over
    await ledger.slow.enqueue_many([[token, 0.02] for token in sorted(tokens)])

    await wait_until(lambda: len(runs(led)) == len(tokens), 50)
    await wait_until(lambda: _empty(producer), 10)  # every run was acked
    sup.proc.send_signal(signal.SIGTERM)
    assert await sup.wait_exit(30) == 0, sup.output()
    done = runs(led)
    assert set(done) == tokens and max(done.values()) == 1
    shown = sup.output()
    assert "recycling worker process after" in shown, shown
    assert "recycled; starting a new one" in shown, shown
    per_process = Counter(pid for _, pid in entries(led, "done"))
    assert len(per_process) > 2
    assert max(per_process.values()) <= 40, per_process  # 40 each at most, even when loaded


async def _empty(app: App) -> bool:
    return await queued(app) == 0


@pytest.mark.heavy
async def test_max_memory_per_child_recycles_a_growing_worker_process(
    supervise: Callable[..., Supervised], nats_url: str, prefix: str, tmp_path: Path
) -> None:
    led = tmp_path / "ledger.txt"
    hoard.app.configure(url=nats_url, prefix=prefix)
    try:
        # no -p: a memory limit alone runs one supervised worker process
        sup = supervise("tests.apps.hoard:app", "-c", "1", "--max-memory-per-child", "150")
        await sup.wait_for("worker ready")
        tokens = {f"d{i}" for i in range(16)}

        await hoard.hoard.enqueue_many([[token, 25] for token in sorted(tokens)])  # 400 MB

        await wait_until(lambda: len(runs(led)) == len(tokens), 40)
        await wait_until(lambda: _empty(hoard.app), 10)
        done = runs(led)
        assert set(done) == tokens and max(done.values()) == 1
        assert "recycling worker process at" in sup.output()
        assert len({pid for _, pid in entries(led, "done")}) > 1
    finally:
        await hoard.app.aclose()


RELOADABLE = """
import os

from taskq import App

app = App()
VERSION = {version}


@app.task
async def ping(token: str) -> None:
    with open(os.environ["TASKQ_TEST_LEDGER"], "a") as ledger:
        ledger.write(f"done {{token}}:{{VERSION}} {{os.getpid()}}\\n")
"""


@pytest.mark.heavy
async def test_reload_restarts_the_worker_when_a_py_file_changes(
    supervise: Callable[..., Supervised], app: App, tmp_path: Path
) -> None:
    led = tmp_path / "ledger.txt"
    project = tmp_path / "project"
    project.mkdir()
    (project / "reloadme.py").write_text(RELOADABLE.format(version=1))
    sup = supervise("reloadme:app", "--reload", cwd=project)
    await sup.wait_for("worker ready")

    @app.task
    async def ping(token: str) -> None: ...

    await ping.enqueue("before")
    await wait_until(lambda: "before:1" in runs(led))

    (project / "reloadme.py").write_text(RELOADABLE.format(version=2))

    await sup.wait_for("reloadme.py changed: restarting 1 worker process(es)")
    await sup.wait_for("worker ready", 2)
    await ping.enqueue("after")
    await wait_until(lambda: "after:2" in runs(led))  # the new code runs it
    (_, first), (_, second) = entries(led, "done")
    assert first != second


async def test_worker_processes_stop_by_themselves_when_the_supervisor_is_killed(
    supervise: Callable[..., Supervised],
) -> None:
    sup = supervise(SPEC, "-p", "2")
    await sup.wait_for("worker ready", 2)
    children = [pid for _, pid in sup.children()]

    sup.proc.kill()

    await wait_until(lambda: not any(alive(pid) for pid in children), 15)
    assert sup.output().count("is gone: stopping this worker process") == 2


@pytest.mark.parametrize(
    ("spec", "code"),
    [("tests.apps.missing:app", 2), ("tests.apps.hooked:app", 1)],  # usage error; failing hook
)
def test_the_supervisor_gives_up_when_no_worker_process_can_start(
    nats_url: str, prefix: str, spec: str, code: int
) -> None:
    # fresh: a supervisor starts worker processes and sets signal handlers (main thread)
    result = run_cli(nats_url, prefix, "worker", spec, "-p", "2", timeout=60, fresh=True)
    assert result.returncode == code, result.stderr
    assert "before it was ready, and no worker process has been ready yet: giving up" in (
        result.stderr
    )


@pytest.mark.parametrize(
    "option",
    [
        ("-p", "0"),
        ("--processes", "many"),
        ("--pool-size", "0"),
        ("--max-tasks-per-child", "0"),
        ("--max-memory-per-child", "-5"),
    ],
)
def test_a_bad_option_value_is_a_usage_error(
    nats_url: str, prefix: str, option: tuple[str, str]
) -> None:
    result = run_cli(nats_url, prefix, "worker", SPEC, *option, timeout=30)
    assert result.returncode == 2, result.stderr
    assert "Invalid value" in result.stderr and "Traceback" not in result.stderr
