"""taskq's test suite (a package: its helpers are imported as `tests.*`).

The suite starts a few hundred Python processes that import taskq (workers, CLI commands,
examples as users run them). A machine that sets `PYTHONDONTWRITEBYTECODE` (CI images often
do) makes each of them compile taskq's ~200 modules again, ~0.2 s of CPU apiece; the suite
writes bytecode caches (git ignores `__pycache__/`) so that only the first one does.

Its temporary files (every test server's store, Postgres's data, the browser's profile) go
to a memory filesystem when the machine has one and TMPDIR names no other place: on ext4 a
nats-server spends ~10 ms of kernel time on each file stream it creates (directories, meta
files, their fsyncs), ~100 ms for the nine streams of an app's first task, ten times what
it spends on tmpfs, in every one of the suite's ~700 tests that provisions a prefix. No
test's subject is the disk: the power-loss tests bring a filesystem of their own.
"""

import os
import sys
import tempfile

MEMORY = "/dev/shm"  # Linux's tmpfs for every user
MEMORY_NEEDED = 2 << 30  # bytes free: the suite's stores take tens of MB


def _memory_temp() -> str | None:
    """A folder for the suite's temporary files on tmpfs, or None to keep the default."""
    if "TMPDIR" in os.environ or not os.access(MEMORY, os.W_OK):
        return None
    stats = os.statvfs(MEMORY)
    if stats.f_bavail * stats.f_frsize < MEMORY_NEEDED:
        return None
    folder = os.path.join(MEMORY, f"taskq-tests-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    # as /tmp: Postgres runs as its own account and makes its folder here
    os.chmod(folder, 0o1777)
    return folder


os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
if (_folder := _memory_temp()) is not None:
    os.environ["TMPDIR"] = _folder  # this process's and every process it starts
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
