"""Bytecode caches written once, before the test processes start, on a fresh clone.

Every test process collects every test module, importing what they import (taskq, NATS,
SQLAlchemy, FastAPI, Playwright, Hypothesis...). On a fresh virtualenv (installed with
`--no-compile`) and a fresh clone there is no bytecode yet, and six processes starting at
once each compiled all of it, and each rewrote the test modules' assertions: measured on
two cores, collection took 60 s and 112 CPU-s, against 23 s and 43 CPU-s with the caches
written. Here the controller first collects once in a single child process (19 s, 19
CPU-s), which writes the caches the six then read: 38 s and 55 CPU-s in all. Beside it, on
the core it leaves idle, a second child imports what the Spark tests' processes import
later (PySpark, its Connect client and its Python workers: 3.4 s of CPU to compile, in
each of the several processes that met it cold), and a third runs mypy once to write its
cache (tests/architecture/typecheck.py: ~20 s of CPU cold, which `test_mypy_strict` paid
in the middle of the run with every core busy; ~1 s warm). A marker in the virtualenv's
and in the tests' cache folders says it was done; a new virtualenv or a new clone has
neither.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = "taskq-tests-collected"
COLLECTING = 300.0  # seconds: a cold collection takes ~20 s on two cores
# imported by the Spark tests' processes, not by collection (taskq imports PySpark lazily)
SPARK = "import pyspark.sql, pyspark.sql.connect.session, pyspark.daemon"


def _markers() -> list[Path]:
    """Where the marker goes: beside the packages' caches and beside the tests'."""
    packages = Path(sysconfig.get_path("purelib")) / "__pycache__"
    return [packages / MARKER, ROOT / "tests" / "__pycache__" / MARKER]


def _spawns_workers(config: pytest.Config) -> bool:
    """True in an xdist controller that is about to start test processes."""
    if hasattr(config, "workerinput") or config.getoption("collectonly"):
        return False
    return bool(config.getoption("numprocesses", default=None)) and (
        config.getoption("dist", default="no") != "no"
    )


def warm_caches(config: pytest.Config) -> None:
    """Collect once in a child process when the caches are cold (see the module's text)."""
    if not _spawns_workers(config) or all(marker.exists() for marker in _markers()):
        return
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0"]
    command += ["-o", "addopts=", "-p", "no:cacheprovider", str(ROOT / "tests")]
    spark = _start([sys.executable, "-c", SPARK])
    collecting = _start(command)
    typecheck = _start([sys.executable, "-m", "tests.architecture.typecheck"])
    try:
        collected = collecting.wait(COLLECTING) == 0
        spark.wait(COLLECTING)
        typecheck.wait(COLLECTING)
    except subprocess.TimeoutExpired:
        return  # the test processes compile for themselves, as without this
    finally:
        for child in (spark, collecting, typecheck):
            child.kill()  # (no-op when it ended)
            child.wait()
    if collected:  # a failed collection shows in the run itself
        for marker in _markers():
            # a read-only site-packages (a system Python's) keeps no marker: the warm-up then
            # runs again in each run, ~7 s for a collection that compiles nothing new
            with contextlib.suppress(OSError):
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()


def _start(command: list[str]) -> subprocess.Popen[bytes]:
    """A child that writes bytecode: tests/__init__.py took PYTHONDONTWRITEBYTECODE out of
    this process's environment, which it inherits."""
    return subprocess.Popen(
        command,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
