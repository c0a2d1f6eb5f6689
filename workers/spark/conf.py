"""A Spark session's configuration and prerequisites: the conf taskq starts it with (fast
start in local mode, FAIR pools), the FAIR allocation file, and the Java check (docs/spark.md
has the measurements behind the defaults)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from xml.sax.saxutils import escape

from taskq.errors import SparkUnavailable
from taskq.settings import Settings

INSTALL_FIX = "install it with: pip install 'taskq[spark]'"
CONNECT_FIX = "install the Connect client with: pip install 'taskq[spark-connect]'"
JAVA_FIX = "install Java 17+ (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
# Local mode starts in ~10 s instead of ~23 s with these (measured, docs/spark.md).
FAST_START = {
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    # no address guessing (and its warning) for a driver that talks only to itself
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}
ALWAYS = {
    # each task gets its own pool, so a short job does not queue behind a long one
    "spark.scheduler.mode": "FAIR",
    # a cancelled job's Python workers are killed this soon, even mid-item
    "spark.python.task.killTimeout": "200ms",
}
ALLOCATION = "spark.scheduler.allocation.file"


def session_conf(settings: Settings) -> dict[str, str]:
    """The Spark conf for `settings`: fast-start defaults for local mode, then taskq's own,
    then the user's `spark_conf` (which wins). Over Spark Connect the server owns the
    cluster's conf: a session gets only the user's (SQL) settings."""
    if settings.spark_master.startswith("sc://"):
        return dict(settings.spark_conf)
    conf: dict[str, str] = {}
    if settings.spark_master.startswith("local"):
        conf.update(FAST_START)
    conf.update(ALWAYS)
    conf.update(settings.spark_conf)
    return conf


def write_pools(pools: set[str]) -> str:
    """A FAIR scheduler allocation file declaring `pools` (Spark warns about undeclared
    pools once each); returns its path."""
    entries = "".join(
        f'  <pool name="{escape(name)}"><schedulingMode>FIFO</schedulingMode>'
        "<weight>1</weight><minShare>0</minShare></pool>\n"
        for name in sorted(pools)
    )
    with tempfile.NamedTemporaryFile(
        "w", prefix="taskq-pools-", suffix=".xml", delete=False
    ) as file:
        file.write(f'<?xml version="1.0"?>\n<allocations>\n{entries}</allocations>\n')
    return file.name


def check_java() -> None:
    """Raise SparkUnavailable unless a Java 17+ runtime is on JAVA_HOME or PATH."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise SparkUnavailable("Spark needs Java, and none was found", JAVA_FIX)
    major = java_major(java)
    if major is not None and major < 17:
        raise SparkUnavailable(f"Spark needs Java 17+, found Java {major} at {java}", JAVA_FIX)


def java_major(java: str) -> int | None:
    """The major version `java -version` reports, or None when it cannot be read."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if not found:
        return None
    first = int(found.group(1))
    return int(found.group(2) or 0) if first == 1 else first  # "1.8" is Java 8
