"""Spark configuration and the one clear message when pyspark or Java is missing (no JVM)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from taskq import App, ConfigError
from taskq.errors import SparkUnavailable
from taskq.settings import Settings
from taskq.workers import Worker
from taskq.workers.spark.conf import FAST_START, session_conf
from taskq.workers.spark.session import SparkRuntime


def test_local_master_gets_fast_start_and_user_conf_wins() -> None:
    conf = session_conf(Settings(spark_conf={"spark.sql.shuffle.partitions": "64"}))
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.scheduler.mode"] == "FAIR"
    assert conf["spark.sql.shuffle.partitions"] == "64"
    cluster = session_conf(Settings(spark_master="spark://10.0.0.1:7077"))
    assert not set(FAST_START) & set(cluster) and cluster["spark.scheduler.mode"] == "FAIR"


def test_master_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKQ_SPARK_MASTER", "k8s://https://api:6443")
    assert App().settings.spark_master == "k8s://https://api:6443"


def test_missing_java_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    with pytest.raises(SparkUnavailable, match=r"Java 17\+") as info:
        SparkRuntime(Settings()).check()
    assert "JAVA_HOME" in info.value.fix


def test_missing_pyspark_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import fails as if not installed
    with pytest.raises(SparkUnavailable, match=r"pip install 'taskq\[spark\]'"):
        SparkRuntime(Settings()).check()


async def test_worker_with_spark_tasks_fails_at_start_not_per_attempt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    app = App(prefix="p")

    @app.task(executor="spark")
    def job(spark: object) -> None: ...

    @app.task
    def plain() -> None: ...

    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(SparkUnavailable):
        Worker(app)
    assert Worker(App(prefix="q")) is not None  # no Spark tasks: no check


def test_batch_task_declarations_are_checked() -> None:
    app = App(prefix="p")

    @app.batch_task(batch_size=10, max_wait=0.1)
    def item(x: int) -> int:
        return x

    assert item.batch is not None and item.batch.batch_size == 10
    assert item.executor == "spark" and list(item.validator.signature.parameters) == ["x"]
    with pytest.raises(ConfigError, match="batch_size"):
        app.batch_task(batch_size=0, name="zero")(lambda x: x)
    with pytest.raises(ConfigError, match="plain def"):

        @app.batch_task()
        async def coro(x: int) -> None: ...

    with pytest.raises(ConfigError, match="spark executor"):
        app.batch_task(executor="default", name="t")(lambda x: x)
    with pytest.raises(ConfigError, match="executor must be one of"):  # `def` runs in threads
        app.task(executor="thread", name="x_thread")(lambda x: x)
    with pytest.raises(ConfigError, match="module level"):  # the pool imports it by name
        app.task(executor="process", name="x_process")(lambda x: x)


async def test_batch_tasks_start_on_spark_connect_with_only_the_users_conf() -> None:
    app = App(prefix="p", spark_master="sc://127.0.0.1:15002", spark_conf={"spark.a": "1"})

    @app.batch_task()
    def item(x: int) -> int:
        return x

    assert Worker(app) is not None  # no session yet: made on the first Spark task
    assert session_conf(app.settings) == {"spark.a": "1"}  # the server owns the cluster's


def test_a_connect_token_never_reaches_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    master = "sc://spark.example:443/;use_ssl=true;token=dapiSECRET;x-cluster-id=7"
    runtime = SparkRuntime(Settings(spark_master=master))
    assert runtime.shown == "sc://spark.example:443/;use_ssl=true;token=***;x-cluster-id=7"

    class Closed:  # what a Connect session is after its server restarted
        is_stopped = True

        def stop(self) -> None: ...

    runtime._session = Closed()
    with caplog.at_level(logging.WARNING, logger="taskq.worker"):
        assert runtime.lost(RuntimeError("NO_ACTIVE_SESSION"))
    assert runtime._session is None  # dropped: the next task makes a new one
    assert "token=***" in caplog.text and "dapiSECRET" not in caplog.text


def test_spark_conf_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKQ_SPARK_CONF", '{"spark.cores.max": "4"}')
    assert App().settings.spark_conf == {"spark.cores.max": "4"}
    monkeypatch.setenv("TASKQ_SPARK_CONF", "spark.cores.max=4")
    with pytest.raises(ConfigError, match="spark_conf"):
        App()
