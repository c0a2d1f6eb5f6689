"""What one task costs each part of the system, in CPU: the figures docs/scaling.md scales.

    python -m bench.scaling [--tasks 20000]

Rates on a 2-core machine shared by the server and the workers say little about a cluster;
CPU seconds per task do: they add up, and divide into cores. For each setting this enqueues
`--tasks` no-op tasks with `enqueue_many` and drains them with one `taskq worker` process,
reading (psutil) the CPU time the nats-server process(es), the worker process and the
producer spent over the whole run:

* one server, R1 streams — taskq's defaults, then `store_result=False`;
* the same on a durable server (`sync_interval: always`, fsync before every ack);
* a 3-node cluster on 127.0.0.1, R3 streams (each server's CPU summed) — the same two;
* the cluster with R1 streams, the records in one results bucket and then spread over three
  (`results_partitions=3`): the busiest node's share shows whether records spread.

Writes bench/results/scaling.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench.run import RESULTS, fresh_prefix, remaining, spawn, wait_marker
from taskq import App
from taskq.server import EmbeddedServer
from tests.cluster import Cluster


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


async def one_run(
    url: str, servers: list[int], tasks: int, lean: bool, replicas: int, results: int = 1
) -> dict[str, Any]:
    """CPU µs per task of the servers (and of the busiest one), the worker and the
    producer, and the drain's rate."""
    prefix = fresh_prefix()
    queue = "lean" if lean else "default"
    producer = App(url=url, prefix=prefix, replicas=replicas, results_partitions=results)

    @producer.task(queue=queue, name="lean" if lean else "noop", store_result=not lean)
    async def noop(n: int = 0) -> None: ...  # what bench.apps:app runs in the worker

    me = os.getpid()
    each = [cpu_seconds([pid]) for pid in servers]
    before = cpu_seconds(servers), cpu_seconds([me])
    await noop.enqueue_many(range(tasks))
    enqueued = cpu_seconds(servers), cpu_seconds([me])
    broker = (await producer.client()).connection
    stream = producer.names.queue_stream(queue)
    cmd = [sys.executable, "-m", "taskq", "--url", url, "--prefix", prefix]
    os.environ["TASKQ_REPLICAS"] = str(replicas)  # the worker's streams, as the producer's
    os.environ["TASKQ_RESULTS_PARTITIONS"] = str(results)
    child = spawn([*cmd, "worker", "bench.apps:app", "-q", queue])
    try:
        await wait_marker([child], "worker ready")
        start_worker = cpu_seconds([child.pid])
        started = time.perf_counter()
        while await remaining(broker, [stream]) > 0:
            await asyncio.sleep(0.01)
        took = time.perf_counter() - started
        worker = cpu_seconds([child.pid]) - start_worker
        after = cpu_seconds(servers)
        shares = [cpu_seconds([pid]) - was for pid, was in zip(servers, each, strict=True)]
    finally:
        child.kill()
        child.wait()
        await producer.aclose()
    micro = 1e6 / tasks
    return {
        "server, enqueue": (enqueued[0] - before[0]) * micro,
        "server, drain": (after - enqueued[0]) * micro,
        "producer": (enqueued[1] - before[1]) * micro,
        "worker": worker * micro,
        "per server": sorted((s * micro for s in shares), reverse=True),
        "drain/s": tasks / took,
    }


async def measure(tasks: int) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for sync, label in ((None, "1 server, R1"), ("always", "1 server, R1, sync always")):
        with (
            tempfile.TemporaryDirectory() as store,
            EmbeddedServer(store_dir=Path(store), sync=sync) as server,
        ):
            assert server.pid is not None
            for lean in (False, True):
                name = f"{label}{', store_result=False' if lean else ''}"
                rows[name] = await one_run(server.url, [server.pid], tasks, lean, 1)
    with tempfile.TemporaryDirectory(prefix="taskq-bench-cluster-") as root:
        cluster = Cluster(Path(root)).start()
        try:
            await cluster.ready()
            pids = [s.pid for s in cluster.servers.values() if s.pid is not None]
            for lean in (False, True):
                name = f"3 nodes, R3{', store_result=False' if lean else ''}"
                rows[name] = await one_run(cluster.url, pids, tasks, lean, 3)
            for results in (1, 3):
                name = f"3 nodes, R1, results_partitions={results}"
                rows[name] = await one_run(cluster.url, pids, tasks, False, 1, results)
        finally:
            cluster.stop()
    return rows


def table(rows: dict[str, dict[str, Any]], tasks: int) -> str:
    lines = [
        f"{tasks} no-op tasks · one worker process · {os.cpu_count()} cores · "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| setting | server CPU µs/task (enqueue + drain) | per server µs/task, busiest first "
        "| worker CPU µs/task | producer CPU µs/task (enqueue_many) | drain tasks/s |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        server = r["server, enqueue"] + r["server, drain"]
        lines.append(
            f"| {name} | {server:.1f} ({r['server, enqueue']:.1f} + {r['server, drain']:.1f}) "
            f"| {' / '.join(f'{s:.0f}' for s in r['per server'])} | {r['worker']:.1f} "
            f"| {r['producer']:.1f} "
            f"| {r['drain/s']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    args = parser.parse_args()
    text = table(asyncio.run(measure(args.tasks)), args.tasks)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scaling.md").write_text(text)


if __name__ == "__main__":
    main()
