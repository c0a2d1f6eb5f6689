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

from bench.run import ROOT, fresh_prefix, spawn, wait_marker
from taskq import App
from tests.cluster import Cluster


async def measure(cluster: Cluster, partitions: int, tasks: int, procs: int) -> dict[str, object]:
    from bench.apps import noop

    prefix = fresh_prefix()
    producer = App(url=cluster.url, prefix=prefix, replicas=3)
    producer.declare_queue("default", partitions=partitions)
    producer.tasks["noop"] = noop
    task = noop.app
    task.configure(url=cluster.url, prefix=prefix, replicas=3)
    task.declare_queue("default", partitions=partitions)
    start = time.perf_counter()
    await noop.enqueue_many(range(tasks))
    enqueued = tasks / (time.perf_counter() - start)
    await task.aclose()
    broker = await producer.broker()
    streams = [producer.names.queue_stream("default", p) for p in
               ([None] if partitions == 1 else range(partitions))]
    leaders = [await broker.stream_leader(s) for s in streams]
    cmd = [sys.executable, "-m", "taskq", "--url", cluster.url, "--prefix", prefix,
           "worker", "bench.apps:app"]
    children = [spawn(cmd) for _ in range(procs)]
    try:
        await wait_marker(children, "worker ready")
        start = time.perf_counter()
        while sum([(await broker.stream_state(s)).messages for s in streams]) > 0:
            await asyncio.sleep(0.02)
        drained = tasks / (time.perf_counter() - start)
    finally:
        for child in children:
            child.kill()
            child.wait()
        await producer.aclose()
    return {"partitions": partitions, "enqueue_many/s": round(enqueued),
            "drain/s": round(drained), "leaders": leaders}


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
