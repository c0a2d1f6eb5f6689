"""Debian packages the tests need, installed by the test run itself when missing.

The README's test command must pass on a fresh machine (CI runs it as root, with no
terminal), and tests that need a system program must never skip for lack of it: the
browser tests need Chromium, the power-loss tests FUSE, the Spark tests a Java runtime.
`ensure(ready, packages, why)` installs the packages with apt-get when `ready()` says the
program is missing (one test process at a time: under pytest-xdist every worker may ask at
once), and raises Unavailable with the reason when it cannot: the tests then fail, visibly.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest


class Unavailable(RuntimeError):
    """A program the tests need is missing and could not be installed."""


def ensure(ready: Callable[[], bool], packages: tuple[str, ...], why: str) -> None:
    """Install `packages` unless `ready()` (`why`: which tests need them, for the lines
    printed while installing); Unavailable if they cannot be, or still are not ready."""
    if ready():
        return
    lock = Path(tempfile.gettempdir()) / f"taskq-tests-{packages[0]}.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        if ready():
            return  # another test process installed them meanwhile
        _install(packages, why)
    if not ready():
        raise Unavailable(f"{' '.join(packages)} installed, and still not usable")


def _install(packages: tuple[str, ...], why: str) -> None:
    if shutil.which("apt-get") is None:
        raise Unavailable(f"{' '.join(packages)} missing, and there is no apt-get to install it")
    sudo: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise Unavailable(f"install {' '.join(packages)} as root for the {why}")
        sudo = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    # a fresh machine may have no package lists yet: update them when the install fails
    installed = _run(install, env, why) == 0 or (
        _run([*sudo, "apt-get", "update", "-q"], env, why) == 0 and _run(install, env, why) == 0
    )
    if not installed:
        raise Unavailable(f"apt-get could not install {' '.join(packages)} (see above)")


def _run(cmd: list[str], env: dict[str, str], why: str) -> int:
    print(f"{why}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, timeout=1200, check=False)
    return done.returncode


class Prerequisite:
    """A system program some tests need: installed before any test runs when one of them
    was collected (outside every test's timeout: apt-get can take minutes on a fresh
    machine), and a clear failure of those tests, never a skip, when it cannot be."""

    def __init__(self, fixture: str, install: Callable[[], object], what: str) -> None:
        self.fixture = fixture  # the fixture the tests that need it use
        self.install = install
        self.what = what  # "browser tests need Chromium", for the failure
        self.problem = ""

    def collected(self, items: list[pytest.Item]) -> None:
        """For `pytest_collection_modifyitems`: install now if a test here needs it (not in
        a collect-only run, tests/warm_caches.py's among them: it runs none)."""
        if items and items[0].config.getoption("collectonly"):
            return
        wanted = any(self.fixture in getattr(item, "fixturenames", ()) for item in items)
        if wanted and not self.problem:
            try:
                self.install()
            except Unavailable as exc:
                self.problem = str(exc) or type(exc).__name__

    def require(self) -> None:
        """In the fixture: fail the test (with why) when the program is missing."""
        if self.problem:
            pytest.fail(f"{self.what}: {self.problem}", pytrace=False)
