"""Servers on power-cut filesystems, their workers, and the power cut that stops them all.

One nats-server (R1) or a 3-node cluster (R3), each node's store on its own FUSE mount
(tests/powercut/mount.py). `power_cut()` SIGKILLs every server and worker process of the
rig in one go (the machines lose power together), then drops each mount's unsynced state;
`power_on()` starts the servers again on what was synced, on the same ports.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from taskq import App
from taskq.server import EmbeddedServer
from taskq.settings import Settings
from tests.cluster import Cluster, ready
from tests.conftest import WorkerProcess, wait_until
from tests.powercut.mount import PowerCutMount
from tests.powercut.streams import streams_led


@dataclass
class Rig:
    """The servers under test: `single` (one EmbeddedServer) or `cluster` (three nodes)."""

    root: Path
    mounts: dict[str, PowerCutMount]
    sync: str | None
    single: EmbeddedServer | None = None
    cluster: Cluster | None = None
    workers: list[WorkerProcess] = field(default_factory=list)
    # apps of shared modules pointed at the rig, with the settings they had before: put
    # back on close, so a later test in this process does not inherit 3 replicas
    configured: list[tuple[App, Settings]] = field(default_factory=list)

    @property
    def replicas(self) -> int:
        return 3 if self.cluster else 1

    @property
    def url(self) -> str:
        if self.cluster:
            return self.cluster.url
        assert self.single is not None
        return self.single.url

    def servers(self) -> list[EmbeddedServer]:
        if self.cluster:
            return list(self.cluster.servers.values())
        return [self.single] if self.single else []

    def start_worker(self, prefix: str, spec: str, *args: str, **env: str) -> WorkerProcess:
        env = {"TASKQ_REPLICAS": str(self.replicas), **env}
        worker = WorkerProcess(self.url, prefix, spec, *args, env=env)
        self.workers.append(worker)
        return worker

    def power_cut(self) -> None:
        """Every server and worker SIGKILLed at once, then only what was synced is kept."""
        pids = [s.pid for s in self.servers() if s.pid] + [w.proc.pid for w in self.workers]
        for pid in pids:  # no process of the rig runs a step between two of these kills
            os.kill(pid, signal.SIGKILL)
        for server in self.servers():
            server.kill()  # reaps it
        for worker in self.workers:
            worker.close()
        self.workers.clear()
        for mount in self.mounts.values():
            mount.cut()

    async def power_on(self) -> None:
        if self.cluster:
            for name in self.cluster.names:
                self.cluster.start_node(name)
        else:
            assert self.single is not None
            self.single.start()
        await self.ready()

    async def ready(self) -> None:
        """A cluster has elected its JetStream meta leader and a leader for every stream
        (a single server: at once)."""
        if self.cluster:
            await ready(self.cluster.url, timeout=60)
            await wait_until(lambda: streams_led(self.cluster_url()), timeout=60, every=0.25)

    def cluster_url(self) -> str:
        assert self.cluster is not None
        return self.cluster.url

    def app(self, prefix: str, configure: App | None = None) -> App:
        """`configure` pointed at the rig (as `--url/--prefix` do), or a fresh App."""
        if configure is None:
            return App(url=self.url, prefix=prefix, replicas=self.replicas)
        self.configured.append((configure, configure.settings))
        configure.configure(url=self.url, prefix=prefix, replicas=self.replicas)
        return configure

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        for app, settings in reversed(self.configured):
            app.settings = settings
        if self.cluster:
            self.cluster.close()
        if self.single:
            self.single.stop()
        for mount in self.mounts.values():
            mount.unmount()


def single_rig(root: Path, sync: str | None) -> Rig:
    mount = PowerCutMount(root / "n1")
    rig = Rig(root, {"n1": mount}, sync)
    try:
        mount.mount()
        rig.single = EmbeddedServer(
            store_dir=mount.path / "store", sync=sync, log_file=root / "n1.log"
        )
        rig.single.start()
    except BaseException:
        rig.close()
        raise
    return rig


def cluster_rig(root: Path, sync: str | None) -> Rig:
    names = ["n1", "n2", "n3"]
    rig = Rig(root, {n: PowerCutMount(root / n) for n in names}, sync)
    try:
        for mount in rig.mounts.values():
            mount.mount()
        rig.cluster = Cluster(root, names, _render(rig))
        rig.cluster.start()
    except BaseException:
        rig.close()
        raise
    return rig


def _render(rig: Rig) -> Callable[[Cluster, str], str]:
    sync = f'sync_interval: "{rig.sync}"' if rig.sync else ""  # quoted: a bare 2m is a size

    def render(cluster: Cluster, name: str) -> str:
        store = rig.mounts[name].path / "store"
        return (
            f"server_name: {name}\nlisten: 127.0.0.1:{cluster.ports[name]}\n"
            f'jetstream {{ store_dir: "{store}"\n {sync} }}\n'
            f"cluster {{ name: powercut\n listen: 127.0.0.1:{cluster.cluster_ports[name]}\n"
            f" routes: [{cluster.routes(name)}] }}\n"
        )

    return render
