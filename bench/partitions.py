"""1 vs N queue partitions on a 3-node JetStream cluster on 127.0.0.1 (R3 streams).

Starts its own three nats-servers (loopback, temporary stores, stopped by PID at the end),
then for each layout: bulk-enqueues a backlog of no-op tasks, and drains it with worker
processes that learn the layout from the server. Prints tasks/s and where each stream's
leader is, so the spread over the nodes shows.

    .venv/bin/python -m bench.partitions --tasks 20000 --procs 2 --partitions 1 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.run import ROOT, fresh_prefix, remaining, spawn, steady_rate, wait_marker
from taskq import App
from tests.cluster import Cluster


async def measure(cluster: Cluster, partitions: int, tasks: int, procs: int) -> dict[str, object]:
    prefix = fresh_prefix()
    producer = App(url=cluster.url, prefix=prefix, replicas=3)

    @producer.task(queue="default", partitions=partitions, name="noop")
    async def noop(n: int = 0) -> None: ...  # what bench.apps:app runs in the workers

    start = time.perf_counter()
    await noop.enqueue_many(range(tasks))
    enqueued = tasks / (time.perf_counter() - start)
    broker = (await producer.client()).connection
    streams = [
        producer.names.queue_stream("default", p)
        for p in ([None] if partitions == 1 else range(partitions))
    ]
    leaders = [await broker.streams.leader(s) for s in streams]
    cmd = [
        sys.executable,
        "-m",
        "taskq",
        "--url",
        cluster.url,
        "--prefix",
        prefix,
        "worker",
        "bench.apps:app",
    ]
    children = [spawn(cmd) for _ in range(procs)]
    try:
        drained, _ = await asyncio.gather(
            steady_rate(lambda: remaining(broker, streams), tasks),
            wait_marker(children, "worker ready"),
        )
    finally:
        for child in children:
            child.kill()
            child.wait()
        await producer.aclose()
    return {
        "partitions": partitions,
        "enqueue_many/s": round(enqueued),
        "drain/s": round(drained),
        "leaders": leaders,
    }


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="taskq-bench-cluster-") as root:
        cluster = Cluster(Path(root)).start()
        try:
            await cluster.ready()
            results = []
            for _ in range(args.runs):
                for partitions in args.partitions:
                    row = await measure(cluster, partitions, args.tasks, args.procs)
                    print(row, flush=True)
                    results.append(row)
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 3])
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ["TASKQ_REPLICAS"] = "3"  # workers keep the streams R3 (drift would be applied)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
