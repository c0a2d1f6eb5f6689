"""Spark fixtures: ONE local SparkSession per test session (start-up costs ~10 s), shared by
every worker the tests start through an attached `SparkRuntime` that never stops it; ONE
Spark Connect server, each test's worker with a Connect session of its own on it."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from taskq.policy import Outcome
from taskq.settings import Settings
from taskq.workers import Worker
from taskq.workers.spark.connect import MODE
from taskq.workers.spark.session import SparkRuntime
from tests.spark.connect_server import ConnectServer
from tests.system_packages import Prerequisite, ensure

STARTED: dict[str, float] = {}


JAVA = Prerequisite(
    "spark_session",
    # Spark 4 runs on Java 17 or 21 (Debian 12 has 17)
    lambda: ensure(
        lambda: shutil.which("java") is not None, ("openjdk-17-jre-headless",), "Spark tests"
    ),
    "Spark tests need Java",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    JAVA.collected(items)


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    """Never skipped: the test run installs a Java runtime when the machine has none, and a
    Spark that still cannot start fails the tests with the reason."""
    JAVA.require()
    runtime = SparkRuntime(Settings(spark_master="local[2]"))
    try:
        runtime.check()
    except Exception as exc:
        pytest.fail(f"Spark unavailable: {exc}")
    began = time.monotonic()
    session = runtime.start()
    STARTED["seconds"] = time.monotonic() - began
    yield session
    asyncio.run(runtime.stop())


@pytest.fixture
async def spark(spark_session: Any) -> AsyncIterator[SparkRuntime]:
    """A runtime on the shared session, for one test's workers (`running_worker(spark=...)`)."""
    runtime = SparkRuntime.attach(spark_session)
    yield runtime
    await runtime.stop()


def spy_outcomes(worker: Worker) -> list[tuple[str, Outcome | None]]:
    """Record (task id, outcome) for every message `worker` judges from now on."""
    seen: list[tuple[str, Outcome | None]] = []
    assert worker._parts is not None, "spy on a running worker"
    the_judge = worker._parts.judge
    judge = the_judge.judge

    async def spy(job: Any) -> Any:
        decision, outcome = await judge(job)
        seen.append((job.envelope.id if job.envelope else "?", outcome))
        return decision, outcome

    the_judge.judge = spy  # type: ignore[method-assign]
    return seen


def active_jobs(session: Any) -> list[int]:
    return list(session.sparkContext.statusTracker().getActiveJobsIds())


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """ONE Spark Connect server per test process that uses it (a JVM: ~15 s of CPU), started
    from PySpark's `sbin/`; a test that kills it starts it again before it ends."""
    JAVA.require()
    with ConnectServer(tmp_path_factory.mktemp("connect")) as server:
        yield server


@pytest.fixture
def connect_url(connect_server: ConnectServer) -> str:
    """The Connect server's `sc://` URL, the server up (an earlier test may have killed it)."""
    if connect_server.process is None:
        connect_server.start()
    return connect_server.url


@pytest.fixture
async def connect(connect_url: str) -> AsyncIterator[SparkRuntime]:
    """A worker's runtime on the Connect server, as `TASKQ_SPARK_MASTER=sc://...` makes it:
    its own session, stopped (released on the server) when the test ends. PySpark marks
    the process as Connect's when a session opens (a classic one is refused after): the
    runtime's stop takes the mark back, whatever sessions it built (a lost one rebuilt)."""
    marked = MODE in os.environ
    runtime = SparkRuntime(Settings(spark_master=connect_url))
    yield runtime
    await runtime.stop()
    assert (MODE in os.environ) == marked, "the Connect runtime left PySpark's mark behind"
