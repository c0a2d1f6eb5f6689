"""A 3-node JetStream cluster on 127.0.0.1 for fault tests: real nats-servers, real routes.

Only loopback addresses; every process is started here and stopped or killed by its PID.
Each node's config names its peers' route ports, so those ports (and the client ports, which
a restarted node binds again) are leased (`taskq.ports`): no other process that leases — a
second xdist worker, another suite — can take one while the cluster lives. If a node still
cannot bind (a process that does not lease took a port), the whole cluster starts again on
fresh ports, a bounded number of times, with a warning.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from taskq.ports import lease_port, release_port
from taskq.server import EmbeddedServer, ServerError

log = logging.getLogger("tests.cluster")

CONFIG = """
server_name: {name}
listen: 127.0.0.1:{port}
jetstream {{ store_dir: "{store}" }}
cluster {{
  name: taskq-test
  listen: 127.0.0.1:{cluster_port}
  routes: [{routes}]
}}
"""

START_ATTEMPTS = 3
DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


@dataclass
class Cluster:
    """Three (or more) nodes whose configs `render(cluster, name)` writes."""

    root: Path
    names: list[str] = field(default_factory=lambda: ["n1", "n2", "n3"])
    render: Callable[[Cluster, str], str] | None = None
    servers: dict[str, EmbeddedServer] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    cluster_ports: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return ",".join(f"nats://127.0.0.1:{self.ports[n]}" for n in self.names)

    def routes(self, name: str, scheme: str = "nats-route://127.0.0.1") -> str:
        """The route URLs of every node but `name`, comma-separated."""
        return ", ".join(f"{scheme}:{self.cluster_ports[n]}" for n in self.names if n != name)

    def config(self, name: str) -> Path:
        text = (self.render or _default_config)(self, name)
        path = self.root / f"{name}.conf"
        path.write_text(text)
        return path

    def start(self) -> Cluster:
        for attempt in range(1, START_ATTEMPTS + 1):
            self._lease()
            try:
                for name in self.names:
                    self.start_node(name)
                return self
            except ServerError as error:
                if attempt == START_ATTEMPTS:
                    raise
                log.warning("cluster start %d failed (%s); fresh ports", attempt, error)
                self.stop()
        raise AssertionError("unreachable")

    def _lease(self) -> None:
        self.release()
        for name in self.names:
            self.ports[name], self.cluster_ports[name] = lease_port(), lease_port()

    def start_node(self, name: str, timeout: float = 15.0) -> None:
        """Start `name` (again, after a kill: same ports, same store)."""
        server = EmbeddedServer(
            port=self.ports[name],
            store_dir=self.root / name,
            config=str(self.config(name)),
            log_file=self.root / f"{name}.log",
        )
        self.servers[name] = server.start(timeout)

    def kill(self, name: str) -> None:
        self.servers[name].kill()

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers.clear()

    def close(self) -> None:
        """Stop every node and give the ports back."""
        self.stop()
        self.release()

    def release(self) -> None:
        """Give the ports back (the cluster must be stopped)."""
        for port in [*self.ports.values(), *self.cluster_ports.values()]:
            release_port(port)
        self.ports.clear()
        self.cluster_ports.clear()

    async def ready(self, timeout: float = 30.0) -> None:
        """Wait until JetStream has a meta leader (an R3 stream can be created)."""
        await ready(self.url, timeout)


def _default_config(cluster: Cluster, name: str) -> str:
    return CONFIG.format(
        name=name,
        port=cluster.ports[name],
        store=cluster.root / name,
        cluster_port=cluster.cluster_ports[name],
        routes=cluster.routes(name),
    )


async def ready(url: str, timeout: float = 30.0, **credentials: str) -> None:
    """Wait until the cluster at `url` has a JetStream meta leader (an R3 stream can be
    created and deleted)."""
    from taskq import App
    from taskq.errors import TaskqError
    from taskq.topology.specs import StreamSpec

    app = App(url=url, prefix="probe", **credentials)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                broker = (await app.client()).connection
                await broker.streams.ensure(StreamSpec("PROBE", ("probe.>",), "limits", 3))
                await broker.streams.delete("PROBE")
                return
            except TaskqError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.25)
    finally:
        await app.aclose()


def shipped_on_loopback(nodes: Cluster, name: str) -> str:
    """deploy/nats/cluster/<name>.conf with its addresses moved to loopback and leased
    ports, its store in the test's directory, monitoring on a port of its own choosing."""
    text = (DEPLOY / "nats" / "cluster" / f"{name}.conf").read_text()
    text = text.replace("listen: 0.0.0.0:4222", f"listen: 127.0.0.1:{nodes.ports[name]}")
    text = re.sub(r"http: [0-9.]+:8222", "http: 127.0.0.1:-1", text)
    text = text.replace("listen: 0.0.0.0:6222", f"listen: 127.0.0.1:{nodes.cluster_ports[name]}")
    text = text.replace("/data/jetstream", str(nodes.root / name))
    for other in nodes.names:
        text = text.replace(f"{other}:6222", f"127.0.0.1:{nodes.cluster_ports[other]}")
    return text
