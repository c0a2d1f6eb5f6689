"""The system Chromium the dashboard's browser tests drive, installed by the project itself.

Playwright never downloads a browser here (no `playwright install`: the machine's network
reaches only the package registries). It drives Debian's `chromium` instead, which
`ensure_chromium()` installs with apt-get when it is missing, so the README's test command
works from a fresh clone (CI runs it as root, with no terminal). When the browser cannot be
installed the browser tests FAIL with the reason: they are never skipped.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM = Path(os.environ.get("TASKQ_TEST_CHROMIUM", "/usr/bin/chromium"))
PACKAGES = ("chromium", "chromium-driver")
LOCK = Path(tempfile.gettempdir()) / "taskq-tests-chromium.lock"
# Every flag matters on a machine with a closed network: without the background-networking
# ones Chromium keeps trying (and failing) to reach Google's hosts.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


class BrowserUnavailable(RuntimeError):
    """Chromium is not installed and could not be installed."""


def ensure_chromium() -> Path:
    """The Chromium binary, installing Debian's packages first when it is missing (one
    test process at a time: under pytest-xdist every worker process may ask at once)."""
    if CHROMIUM.exists():
        return CHROMIUM
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if CHROMIUM.exists():
            return CHROMIUM  # another test process installed it meanwhile
        return _install()


def _install() -> Path:
    if shutil.which("apt-get") is None:
        raise BrowserUnavailable(f"{CHROMIUM} is missing and there is no apt-get to install it")
    sudo: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise BrowserUnavailable(f"{CHROMIUM} is missing; install {' '.join(PACKAGES)} as root")
        sudo = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "-q", *PACKAGES]
    # a fresh machine may have no package lists yet: update them when the install fails
    installed = _run(install, env) == 0 or (
        _run([*sudo, "apt-get", "update", "-q"], env) == 0 and _run(install, env) == 0
    )
    if not installed:
        raise BrowserUnavailable(f"apt-get could not install {' '.join(PACKAGES)} (see above)")
    if not CHROMIUM.exists():
        raise BrowserUnavailable(f"{' '.join(PACKAGES)} installed, but {CHROMIUM} is missing")
    return CHROMIUM


def _run(cmd: list[str], env: dict[str, str]) -> int:
    print(f"dashboard tests: {' '.join(cmd)}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, timeout=1200, check=False)
    return done.returncode


if __name__ == "__main__":  # `python -m tests.dashboard.browser`: install it by hand
    print(ensure_chromium())
