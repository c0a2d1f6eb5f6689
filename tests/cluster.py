"""A 3-node JetStream cluster on 127.0.0.1 for fault tests: real nats-servers, real routes.

Only loopback addresses and free ports; every process is started here and stopped or killed
by its PID.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from taskq.server import EmbeddedServer, free_port

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


@dataclass
class Cluster:
    root: Path
    names: list[str] = field(default_factory=lambda: ["n1", "n2", "n3"])
    servers: dict[str, EmbeddedServer] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    cluster_ports: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return ",".join(f"nats://127.0.0.1:{self.ports[n]}" for n in self.names)

    def config(self, name: str) -> Path:
        routes = ", ".join(
            f"nats-route://127.0.0.1:{self.cluster_ports[n]}" for n in self.names if n != name
        )
        path = self.root / f"{name}.conf"
        path.write_text(
            CONFIG.format(
                name=name,
                port=self.ports[name],
                store=self.root / name,
                cluster_port=self.cluster_ports[name],
                routes=routes,
            )
        )
        return path

    def start(self) -> Cluster:
        for name in self.names:
            self.ports[name], self.cluster_ports[name] = free_port(), free_port()
        for name in self.names:
            self.start_node(name)
        return self

    def start_node(self, name: str) -> None:
        server = EmbeddedServer(
            port=self.ports[name],
            store_dir=self.root / name,
            config=str(self.config(name)),
            log_file=self.root / f"{name}.log",
        )
        self.servers[name] = server.start()

    def kill(self, name: str) -> None:
        self.servers[name].kill()

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()

    async def ready(self, timeout: float = 30.0) -> None:
        """Wait until JetStream has a meta leader (an R3 stream can be created)."""
        await ready(self.url, timeout)


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
