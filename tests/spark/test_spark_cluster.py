"""Both Spark task shapes through `taskq worker` against a standalone Spark cluster (a master
and a worker started here on 127.0.0.1 from the pip package's `spark-class`)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from taskq import App
from taskq.ports import lease_port
from tests.conftest import WorkerProcess, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]


class Cluster:
    """A standalone master and one worker (ours, stopped by PID with their executors)."""

    def __init__(self, folder: Path) -> None:
        import pyspark  # a dev dependency: never skipped

        self.spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        self.port = lease_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.folder = folder
        self.procs: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(self.folder)}
        with open(self.folder / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [str(self.spark_class), *args], stdout=log, stderr=subprocess.STDOUT, env=env
            )
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    async def start(self) -> None:
        self._start(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.port), "--webui-port", str(lease_port()),
        )  # fmt: skip
        await wait_until(lambda: "I have been elected leader" in self.log("master"), 90, 0.5)
        self._start(
            "worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
            "--cores", "2", "--memory", "1g", "--webui-port", str(lease_port()), self.url,
        )  # fmt: skip
        await wait_until(lambda: "Registering worker" in self.log("master"), 90, 0.5)

    def stop(self) -> None:
        import psutil

        for proc in reversed(self.procs):  # worker first: it stops its executors
            family = [proc.pid]
            if proc.poll() is None:
                family += [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            for pid in family[1:]:  # executors left behind, by PID
                if psutil.pid_exists(pid):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path)
    yield running
    running.stop()


async def test_job_and_batch_tasks_on_a_standalone_cluster(
    app: App,
    cluster: Cluster,
    worker_process: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    from tests.spark import apps

    await cluster.start()
    env = {"TASKQ_SPARK_MASTER": cluster.url, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = worker_process("tests.spark.apps:app", env=env)
    await proc.wait_ready(60)
    apps.app.configure(url=app.settings.url, prefix=app.settings.prefix)
    marks = tmp_path / "marks"
    marks.mkdir()
    answer = tmp_path / "answer"
    try:
        await apps.double.enqueue_many([[x, str(marks)] for x in range(300)])
        await apps.count_words.enqueue("the quick brown fox jumps", str(answer))
        await wait_until(lambda: proc.output().count("succeeded ") == 301, 240, 0.5)
    finally:
        await apps.app.aclose()
    assert answer.read_text() == "5"
    assert sorted(int(p.name) for p in marks.iterdir()) == list(range(300))
    executors = {p.read_text() for p in marks.iterdir()}
    assert str(proc.proc.pid) not in executors  # run by the cluster's executors
    assert f"spark session on {cluster.url}" in proc.output()
    broker = (await app.client()).connection
    assert (await broker.streams.state(app.names.queue_stream("default"))).messages == 0
