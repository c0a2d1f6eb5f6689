"""A real Spark Connect server for the tests, started from PySpark's own distribution
(`sbin/start-connect-server.sh --wait`, in the foreground so the test owns its PID) on a free
loopback port, with `local[2]` behind it; killed for real (SIGKILL to the process group the
test started) and started again on the same port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from tests.postgres import free_port

START_WITHIN = 120.0  # seconds: a JVM on a loaded 2-core machine, then the gRPC service
CONF = {
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    # what taskq sets on a session it starts itself; a Connect server is configured by
    # whoever runs it (docs/spark.md)
    "spark.scheduler.mode": "FAIR",
    "spark.python.task.killTimeout": "200ms",
}


def home() -> Path:
    """The pip package's folder: a Spark distribution (imported only by the tests that start
    a server, not by every test process that loads the fixtures)."""
    import pyspark

    return Path(pyspark.__file__).parent


WARM = """
import os, sys
from pyspark.sql import SparkSession
session = SparkSession.builder.remote(sys.argv[1]).create()
session.range(2).repartition(2).mapInArrow(lambda batches: batches, "id long").count()
session.stop()
os._exit(0)  # not through gRPC's channel teardown at exit, which can block
"""


class ConnectServer:
    """`with ConnectServer(tmp) as server:` a server at `server.url` until the block ends."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.started: list[float] = []  # seconds each start took

    def start(self, warm: bool = True) -> None:
        """Start the server and wait until its gRPC port answers (and with `warm`, until it
        served a first query)."""
        conf = {**CONF, "spark.connect.grpc.binding.port": str(self.port)}
        argv = [str(home() / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2]"]
        argv += ["--driver-java-options", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        self._wait_closed(time.monotonic() + 30)  # no earlier server still on the port
        log = open(self.folder / f"connect-{len(self.started)}.log", "wb")  # noqa: SIM115
        began = time.monotonic()
        self.process = subprocess.Popen(
            argv,
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the JVM dies with it
        )
        log.close()
        self._wait_listening(began + START_WITHIN)
        if warm:
            self._warm()
        self.started.append(time.monotonic() - began)

    def _warm(self) -> None:
        """Serve a first query (a session, a plan, a Python worker): a freshly started server
        takes 30 to 60 s over it under the suite's load, which is the server's start, not
        what a test measures. From another interpreter: PySpark keeps a process-wide default
        session, which a session made and stopped here would take from the test's worker."""
        done = subprocess.run(
            [sys.executable, "-c", WARM, self.url],
            capture_output=True,
            text=True,
            timeout=START_WITHIN,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the Connect server's first query failed: {done.stderr[-2000:]}")

    def kill(self) -> None:
        """SIGKILL the server (its whole process group) and reap it."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        # the JVM's socket outlives the script reaped above by a moment: a start before it is
        # closed saw the dying server listening (and the new one failed to bind the port)
        self._wait_closed(time.monotonic() + 30)

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def _wait_closed(self, deadline: float) -> None:
        while self._listening():
            if time.monotonic() > deadline:
                raise RuntimeError(f"port {self.port} still answers after the server was killed")
            time.sleep(0.1)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(home()),
            PYSPARK_PYTHON=sys.executable,  # the server's Python workers import taskq
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.folder),
            SPARK_PID_DIR=str(self.folder),
            SPARK_CONF_DIR=str(self.folder),  # none of the machine's spark-defaults
        )
        return env

    def _wait_listening(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the Connect server exited: {self.log_tail()}")
            if self._listening():
                return
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"the Connect server did not listen in {START_WITHIN}s")

    def log_tail(self) -> str:
        logs = sorted(self.folder.glob("connect-*.log"))
        return logs[-1].read_text(errors="replace")[-6000:] if logs else ""

    def __enter__(self) -> ConnectServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()
