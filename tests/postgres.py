"""A throwaway Postgres for the outbox tests and the peer benchmark: `initdb` + `pg_ctl
start` in a temporary directory, on a free loopback port, its unix socket in its own
directory. Debian's `postgresql` is installed by the test run when no `initdb` is found
(tests/system_packages.py): the database tests never skip."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from tests.system_packages import ensure


def free_port() -> int:
    """A loopback port nothing listens on now (Postgres takes it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pg_bin() -> Path | None:
    """Where initdb and pg_ctl are: $TASKQ_PG_BIN, the PATH, or Debian's versioned
    /usr/lib/postgresql/N/bin (the newest); None when Postgres is not installed."""
    if os.environ.get("TASKQ_PG_BIN"):
        return Path(os.environ["TASKQ_PG_BIN"])
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3])
    )
    return versions[-1].parent if versions else None


def ensure_postgres() -> Path:
    """initdb's directory, installing Debian's `postgresql` first when it is missing."""
    ensure(lambda: pg_bin() is not None, ("postgresql",), "the outbox tests (Postgres)")
    where = pg_bin()
    assert where is not None
    return where


def run_as() -> dict[str, int]:
    """Popen's user/group for initdb and postgres: they refuse to run as root, so as root
    they run as the `postgres` account if there is one, else `nobody`."""
    if os.geteuid() != 0:
        return {}
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return {"user": entry.pw_uid, "group": entry.pw_gid}
    raise RuntimeError("running as root and no `postgres` or `nobody` account for Postgres")


class PgServer:
    """One Postgres in a temporary directory; `stop()` stops that one server (pg_ctl acts
    on its own data directory) and removes the directory."""

    def __init__(self, binaries: Path | None = None) -> None:
        self.bin = binaries or ensure_postgres()
        self.dir = Path(tempfile.mkdtemp(prefix="taskq-pg-"))
        self.data = self.dir / "data"
        self.port = 0
        self.account = run_as()
        if self.account:
            os.chown(self.dir, self.account["user"], self.account["group"])

    @property
    def dsn(self) -> str:
        """Where clients connect: TCP on the loopback port, user `bench`, db `postgres`."""
        return f"postgresql://bench@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd: str) -> None:
        """A Postgres binary run to completion (as the Postgres account), or an error."""
        done = subprocess.run(
            [str(self.bin / cmd[0]), *cmd[1:]], capture_output=True, text=True, **self.account
        )
        if done.returncode:
            raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stderr[-2000:]}")

    def start(self) -> PgServer:
        """initdb (trust auth, user `bench`), then start and wait until it takes queries."""
        self._run("initdb", "-D", str(self.data), "-U", "bench", "--auth=trust", "--no-sync")
        self.port = free_port()
        opts = f"-p {self.port} -h 127.0.0.1 -k {self.dir}"
        log = str(self.dir / "postgres.log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-o", opts, "-w", "start")
        return self

    def stop(self) -> None:
        """Stop this data directory's server (fast: rolls back open sessions), remove it."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def version(self) -> str:
        """`postgres --version`."""
        out = subprocess.run([str(self.bin / "postgres"), "--version"], capture_output=True)
        return out.stdout.decode().strip()

    def __enter__(self) -> PgServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
