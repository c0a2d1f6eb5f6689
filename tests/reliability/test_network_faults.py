"""Network faults: a worker's or a producer's link to NATS drops and comes
back (a loopback proxy the test cuts, tests/proxy.py); a cluster node is cut off from its
peers. Nothing is lost: every task is stored once and runs to a result.

The issue's 10 s outage is shortened to OUTAGE: what it exercises is the client's reconnect
(every 0.5 s, forever) and the retried settles, not the length; tasks' `ack_wait` (1 s) is
shorter than the outage, so deliveries in flight when the link drops are redelivered too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from taskq import App
from taskq.errors import NotFound, TaskqError
from taskq.ports import lease_port
from taskq.server import EmbeddedServer
from tests.cluster import ready
from tests.conftest import running_worker, wait_until
from tests.proxy import Proxy

OUTAGE = 1.5  # seconds the link stays cut


@pytest.fixture
async def proxy(nats_server: EmbeddedServer) -> AsyncIterator[Proxy]:
    link = await Proxy(nats_server.port).start()
    yield link
    await link.close()


def declare(app: App, ran: Counter[int]) -> object:
    @app.task(ack_wait=1.0, max_retries=5)
    async def step(n: int) -> int:
        ran[n] += 1
        await asyncio.sleep(0.2)
        return n * 2

    return step


async def test_a_worker_cut_off_for_a_while_recovers_and_loses_nothing(
    app: App, prefix: str, proxy: Proxy
) -> None:
    ran: Counter[int] = Counter()
    producer_step = declare(app, ran)
    remote = App(url=proxy.url, prefix=prefix)  # the worker reaches NATS through the proxy
    declare(remote, ran)
    count = 40
    handles = [await producer_step.enqueue(n) for n in range(count)]  # type: ignore[attr-defined]
    try:
        async with running_worker(remote, concurrency=8) as worker:
            await wait_until(lambda: len(ran) >= 8)  # tasks running when the link drops
            proxy.cut()
            await asyncio.sleep(OUTAGE)  # the fault itself: the link is down this long
            cut_at = sum(ran.values())
            proxy.restore()
            results = [await h.result(timeout=30) for h in handles]
            assert results == [n * 2 for n in range(count)]
            assert proxy.accepted >= 2, "the worker never reconnected"
            await wait_until(lambda: worker.stats["succeeded"] >= count)
    finally:
        await remote.aclose()
    assert set(ran) == set(range(count))
    print(
        f"{count} tasks, link cut {OUTAGE:g}s after {cut_at} runs; "
        f"runs {sum(ran.values())}, repeated {sum(ran.values()) - count}, lost 0"
    )


@pytest.mark.slow  # ~6 s: a publish lost with the link is re-sent after its 5 s ack deadline
async def test_a_producer_cut_off_mid_enqueue_many_stores_each_task_once(
    app: App, prefix: str, proxy: Proxy
) -> None:
    remote = App(url=proxy.url, prefix=prefix)
    step = declare(remote, Counter())
    declare(app, Counter())
    count = 10_000
    client = await app.client()
    stream = app.names.queue_stream("default")
    try:
        await remote.client()  # connected through the proxy before the bulk starts
        bulk = asyncio.create_task(step.enqueue_many(list(range(count))))  # type: ignore[attr-defined]

        async def started() -> bool:
            with contextlib.suppress(NotFound):  # the stream is made by the first publish
                return (await client.connection.streams.state(stream)).messages > 0
            return False

        await wait_until(started, every=0.005)
        assert not bulk.done(), "the bulk finished before the link was cut"
        proxy.cut()
        await asyncio.sleep(OUTAGE)  # the fault itself: the link is down this long
        proxy.restore()
        handles = await asyncio.wait_for(bulk, timeout=60)
    finally:
        await remote.aclose()
    assert len({h.id for h in handles}) == count
    assert (await client.connection.streams.state(stream)).messages == count


ROUTED = """
server_name: {name}
listen: 127.0.0.1:{port}
jetstream {{ store_dir: "{store}" }}
cluster {{
  name: taskq-isolation
  listen: 127.0.0.1:{cluster_port}
  # routes run only through the test's proxies: an address nobody listens on is advertised,
  # so no node learns a way around them (implicit routes)
  advertise: "127.0.0.1:{nowhere}"
  routes: [{routes}]
}}
"""


class RoutedCluster:
    """Three nodes whose every route goes through a proxy per (from, to) pair."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.names = ("n1", "n2", "n3")
        self.ports = {n: lease_port() for n in self.names}
        self.cluster_ports = {n: lease_port() for n in self.names}
        self.links: dict[tuple[str, str], Proxy] = {}
        self.servers: list[EmbeddedServer] = []

    def url(self, *names: str) -> str:
        return ",".join(f"nats://127.0.0.1:{self.ports[n]}" for n in names)

    async def start(self) -> None:
        for a in self.names:
            for b in self.names:
                if a != b:
                    self.links[a, b] = await Proxy(self.cluster_ports[b]).start()
        for name in self.names:
            routes = ", ".join(
                f"nats-route://127.0.0.1:{link.port}"
                for (a, _), link in self.links.items()
                if a == name
            )
            conf = self.root / f"{name}.conf"
            conf.write_text(
                ROUTED.format(
                    name=name,
                    port=self.ports[name],
                    store=self.root / name,
                    cluster_port=self.cluster_ports[name],
                    nowhere=lease_port(),
                    routes=routes,
                )
            )
            server = EmbeddedServer(
                port=self.ports[name],
                store_dir=self.root / name,
                config=str(conf),
                log_file=self.root / f"{name}.log",
            )
            self.servers.append(server.start())

    def isolate(self, name: str) -> None:
        """Cut every route to and from `name` (its clients' links stay)."""
        for pair, link in self.links.items():
            if name in pair:
                link.cut()

    def heal(self, name: str) -> None:
        for pair, link in self.links.items():
            if name in pair:
                link.restore()

    async def close(self) -> None:
        for server in self.servers:
            server.stop()
        for link in self.links.values():
            await link.close()


@pytest.mark.slow  # ~15 s: three servers, their elections, a drain on R3 streams
async def test_a_cluster_node_cut_off_from_its_peers_keeps_the_cluster_serving(
    tmp_path: Path,
) -> None:
    nodes = RoutedCluster(tmp_path)
    await nodes.start()
    # the clients are on the majority's side of the partition, as a load balancer keeps them
    app = App(url=nodes.url("n1", "n2"), prefix="iso", replicas=3)
    ran: Counter[int] = Counter()
    step = declare(app, ran)
    count = 200
    try:
        await ready(nodes.url("n1", "n2"), timeout=60)
        half = await step.enqueue_many(list(range(count // 2)))  # type: ignore[attr-defined]
        await lead_from(app, nodes.url("n1"), app.names.queue_stream("default"), "n3")
        async with running_worker(app, concurrency=16) as worker:
            await wait_until(lambda: len(ran) >= 20, timeout=30)
            nodes.isolate("n3")
            rest = await step.enqueue_many(list(range(count // 2, count)))  # type: ignore[attr-defined]
            results = [await h.result(timeout=60) for h in [*half, *rest]]
            assert results == [n * 2 for n in range(count)]
            await wait_until(lambda: worker.stats["succeeded"] >= count, timeout=30)
            nodes.heal("n3")
    finally:
        await app.aclose()
        await nodes.close()
    assert set(ran) == set(range(count))
    print(f"isolated n3, the queue's leader; {count} tasks, runs {sum(ran.values())}, lost 0")


async def lead_from(app: App, url: str, stream: str, node: str) -> None:
    """Move `stream`'s leadership to `node` (the worst node to lose: the one that leads)."""
    streams = (await app.client()).connection.streams
    broker = await nats.connect(url)
    try:
        while (leader := await streams.leader(stream)) != node:
            body = json.dumps({"placement": {"preferred": node}}).encode()
            await broker.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", body, timeout=5)
            await wait_until(lambda: stepped(streams, stream, leader), timeout=15, every=0.1)
    finally:
        await broker.close()


async def stepped(streams: Any, stream: str, before: str | None) -> bool:
    with contextlib.suppress(TaskqError):
        return await streams.leader(stream) not in (before, None)
    return False
