"""The power-cut filesystem (tests/powercut/fs.py) mounted for a test, and FUSE installed.

The FUSE daemon runs in a process of its own (libfuse's loop owns its main thread), started
and stopped here by its PID. `PowerCutMount.cut()` is the power cut: the caller has already
SIGKILLed every process writing to the mount, so the durable image holds exactly what was
fsynced; the mount is dropped, and the next `mount()` shows only that image.

Debian's `fuse3` (fusermount3, libfuse3) is installed with apt-get when missing, as the
dashboard tests install Chromium (tests/dashboard/browser.py): once, under a file lock, so
the README's test command works on a fresh machine. `mfusepy` comes with the `dev` extra.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.system_packages import Unavailable, ensure

PACKAGES = ("fuse3", "libfuse3-3")


class FuseUnavailable(Unavailable):
    """FUSE cannot be used here (no /dev/fuse, or fuse3 could not be installed)."""


def fuse_ready() -> bool:
    return shutil.which("fusermount3") is not None and ctypes.util.find_library("fuse3") is not None


def ensure_fuse() -> None:
    """fusermount3 and libfuse3, installing Debian's packages first when missing."""
    if not Path("/dev/fuse").exists():
        raise FuseUnavailable("/dev/fuse is missing: the kernel or container has no FUSE")
    try:
        ensure(fuse_ready, PACKAGES, "power-cut tests")
    except Unavailable as exc:
        raise FuseUnavailable(str(exc)) from None


class PowerCutMount:
    """`root/mnt` over `root/live`, with `root/durable` as what survives a power cut."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.live, self.durable, self.path = root / "live", root / "durable", root / "mnt"
        self.stats_file = root / "stats.json"
        self.log = root / "fuse.log"
        self.daemon: subprocess.Popen[bytes] | None = None
        self.cuts: list[dict[str, int]] = []  # the daemon's counts, one per mount

    def mount(self, timeout: float = 20.0) -> PowerCutMount:
        for folder in (self.live, self.durable, self.path):
            folder.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.daemon = subprocess.Popen(
                [sys.executable, "-m", "tests.powercut.fs", *self._args()],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.path):
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                self.unmount()
                raise FuseUnavailable(f"the FUSE mount did not come up: {self.log.read_text()}")
            time.sleep(0.02)
        return self

    def _args(self) -> list[str]:
        return [str(p) for p in (self.live, self.durable, self.path, self.stats_file)]

    def cut(self) -> dict[str, int]:
        """The power cut (writers already SIGKILLed): unmount, keep only the durable image,
        mount again. Returns the daemon's counts for the power-on period that ended."""
        counts = self.unmount()
        shutil.rmtree(self.live)
        shutil.copytree(self.durable, self.live, symlinks=True)
        self.mount()
        return counts

    def unmount(self) -> dict[str, int]:
        """Unmount (lazily if busy) and stop the daemon by its PID; safe to call twice."""
        if os.path.ismount(self.path):
            done = subprocess.run(["fusermount3", "-u", str(self.path)], capture_output=True)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
        daemon, self.daemon = self.daemon, None
        if daemon is not None:
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(5)
        counts: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError):
            counts = json.loads(self.stats_file.read_text())
            self.stats_file.unlink()
        self.cuts.append(counts)
        return counts
