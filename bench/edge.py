"""Edge sites on loopback (docs/edge.md): how fast a site catches up after its link to the hub
returns, how long a result takes to flow back to the hub, and how many ran twice.

    python -m bench.edge [--tasks 1000] [--cut 5]

A hub and a site (`taskq.server.Edge`), the site's leaf connection through a TCP proxy; a
worker at the site. Measures: tasks the hub sends to the site, enqueue to result read at the
hub (p50/p99); a cut of `--cut` seconds with `--tasks` sent meanwhile, then from the link's
return to the last of them run, and to the last result read at the hub; runs counted per
task. Writes bench/results/edge.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.run import main_with, measures
from taskq import App
from taskq.server import Edge, EmbeddedServer
from taskq.timings import Timings
from taskq.workers import Worker
from taskq.workers.sites import provision_hub, provision_site
from tests.proxy import Proxy


def declare(app: App, runs: dict[int, int]) -> None:
    @app.task
    async def add(n: int) -> int:
        runs[n] = runs.get(n, 0) + 1
        return n


async def measure(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        hub = EmbeddedServer(store_dir=root / "hub", edge=Edge(domain="hub", leaf_port=0)).start()
        assert hub.edge.leaf_port
        link = await Proxy(hub.edge.leaf_port).start()
        edge = Edge(domain="s1", hub=f"nats-leaf://127.0.0.1:{link.port}")
        site = EmbeddedServer(store_dir=root / "site", edge=edge).start()
        try:
            return await _run(hub, site, link, args)
        finally:
            await link.close()
            site.stop()
            hub.stop()


async def _run(
    hub: EmbeddedServer, site: EmbeddedServer, link: Proxy, args: argparse.Namespace
) -> str:
    prefix = "e" + uuid.uuid4().hex[:8]
    runs: dict[int, int] = {}
    at_hub = App(url=hub.url, prefix=prefix, timings=Timings.short())
    at_site = App(url=site.url, prefix=prefix, timings=Timings.short())
    declare(at_hub, {})
    declare(at_site, runs)
    await asyncio.sleep(1.0)  # the leaf connection
    await provision_site(at_site, await at_site.client(), "s1", ["default"])
    await provision_hub(at_hub, await at_hub.client(), ["s1"], ["default"])
    add = at_hub.tasks["add"].options(site="s1")
    worker = Worker(at_site, concurrency=32, fetch_timeout=0.1)
    job = asyncio.create_task(worker.run())
    await worker.wait_ready()
    await (await add.enqueue(-1)).result(timeout=60)  # both sources up
    latencies = []
    for n in range(200):
        began = time.perf_counter()
        await (await add.enqueue(n)).result(timeout=60)
        latencies.append(time.perf_counter() - began)
    link.cut()
    sent = [await add.enqueue(n) for n in range(1000, 1000 + args.tasks)]
    await asyncio.sleep(args.cut)
    link.restore()
    back = time.perf_counter()
    while not all(n in runs for n in range(1000, 1000 + args.tasks)):
        await asyncio.sleep(0.01)
    ran_after = time.perf_counter() - back
    for handle in sent:
        await handle.result(timeout=120)
    results_after = time.perf_counter() - back
    worker.stop()
    await job
    for app in (at_hub, at_site):
        await app.aclose()
    twice = sum(1 for count in runs.values() if count > 1)
    lost = sum(1 for n in [*range(200), *range(1000, 1000 + args.tasks)] if n not in runs)
    return _report(args, latencies, ran_after, results_after, twice, lost)


def _report(args, latencies, ran_after, results_after, twice, lost) -> str:  # type: ignore[no-untyped-def]
    latencies.sort()
    p50, p99 = statistics.median(latencies), latencies[int(0.99 * (len(latencies) - 1))]
    rows = [
        (
            "hub to site and back: enqueue at the hub to result read there, one at a time",
            f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms",
        ),
        (
            f"{args.tasks} sent during a {args.cut:g} s cut: link back to the last run at the site",
            f"{ran_after:.2f} s",
        ),
        ("... to the last result read at the hub", f"{results_after:.2f} s"),
        ("lost / run twice", f"{lost} / {twice}"),
    ]
    return measures("edge sites on loopback", rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--cut", type=float, default=5.0)
    main_with("edge.md", measure, parser)


if __name__ == "__main__":
    main()
