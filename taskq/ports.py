"""Loopback ports that nobody else will take: leases for the ports a program must name ahead.

A server started on port 0 (nats-server's `-p -1`) takes its port the moment it binds, and
that is how taskq starts one wherever it can. Some ports must be known before their server
binds them, or kept while it is down: a cluster's route ports (each node's config names the
others'), and a server that a test kills and starts again on the same address. Picking a
free port and binding it later is a race: another process (a second pytest-xdist worker, a
user's parallel suite) can take it in between.

A lease closes that race for every process that leases through here:
- ports come from below the kernel's ephemeral range (`ip_local_port_range`), which it
  never hands out for a bind to port 0 or an outgoing connection;
- each leased port is held by an exclusive `flock` on a file of its own in a shared
  directory, so two processes never lease the same port (the kernel drops the lock when
  the holder exits, even by SIGKILL);
- a port is only leased if binding it succeeds right then (nobody listens or lingers there).

`TASKQ_PORT_RANGE=LOW-HIGH` (inclusive) sets the range; the default is the 10,000 ports
below the ephemeral range.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

from taskq.errors import ConfigError, TaskqError


class PortsExhausted(TaskqError):
    """Every port of the lease range is leased or in use."""

    def __init__(self, low: int, high: int) -> None:
        super().__init__(
            f"no free port to lease in {low}-{high}: all are leased or in use "
            "(set TASKQ_PORT_RANGE=LOW-HIGH to widen the range)"
        )
        self.low = low
        self.high = high


_LOCK = threading.Lock()
_held: dict[int, int] = {}  # port -> fd of its lock file, for this process


def lease_port(host: str = "127.0.0.1") -> int:
    """A port on `host` that is free now and that no other leasing process will get until
    this one releases it (or exits)."""
    low, high = port_range()
    count = high - low + 1
    start = random.randrange(count)  # spread processes over the range: fewer lock probes
    with _LOCK:
        for step in range(count):
            port = low + (start + step) % count
            if port in _held:
                continue
            fd = _lock(port)
            if fd is None:
                continue
            if _bindable(host, port):
                _held[port] = fd
                return port
            os.close(fd)
    raise PortsExhausted(low, high)


def release_port(port: int) -> None:
    """Give a leased port back (nothing if this process does not hold it)."""
    with _LOCK:
        fd = _held.pop(port, None)
    if fd is not None:
        os.close(fd)


def port_range() -> tuple[int, int]:
    """The (low, high) ports leases come from, both inclusive."""
    configured = os.environ.get("TASKQ_PORT_RANGE", "").strip()
    if configured:
        return _parse_range(configured)
    ephemeral_low = _ephemeral_low()
    return max(1024, ephemeral_low - 10_000), ephemeral_low - 1


def _parse_range(text: str) -> tuple[int, int]:
    low_text, _, high_text = text.partition("-")
    try:
        low, high = int(low_text), int(high_text)
    except ValueError:
        raise ConfigError(f"TASKQ_PORT_RANGE must be LOW-HIGH, not {text!r}") from None
    if not 1024 <= low <= high <= 65535:
        raise ConfigError(f"TASKQ_PORT_RANGE must lie in 1024-65535 with LOW <= HIGH: {text!r}")
    return low, high


def _ephemeral_low() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 49152  # IANA's dynamic range, which macOS and the BSDs use


def _lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "taskq-ports"
    path.mkdir(mode=0o777, exist_ok=True)
    return path


def _lock(port: int) -> int | None:
    """The fd of the port's lock file, locked for this process; None if someone holds it."""
    fd = os.open(_lock_dir() / str(port), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _bindable(host: str, port: int) -> bool:
    # no SO_REUSEADDR: a socket lingering in TIME_WAIT makes the port unfit too
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, contextlib.suppress(OSError):
        sock.bind((host, port))
        return True
    return False
