"""Spark batch tasks beside plain tasks: the same N items, one worker, one server.

    .venv/bin/python -m bench.spark --items 100000 --master 'local[2]'
    .venv/bin/python -m bench.spark --connect --items 20000

With `--connect`: the same batch drain, and a job task's latency from enqueue to result, on
`local[2]` and over Spark Connect to a server on 127.0.0.1 started from PySpark's `sbin/`
(itself on `local[2]`), written to bench/results/spark-connect.md.

Measures the SparkSession's start-up, then drains a backlog of N items twice in one
in-process worker: as a Spark batch task (`batch_size` items per Spark job) and as a plain
`def` task on the worker's threads. The item is trivial (i * i), so this is the cost of
taskq's path per item, not of the work.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.run import RESULTS, ROOT
from taskq import App
from taskq.cli.main import run_async
from taskq.server import EmbeddedServer
from taskq.workers import Worker
from taskq.workers.spark.session import SparkRuntime


def square(i: int) -> int:
    return i * i


async def drain(app: App, task: Any, items: int, runtime: SparkRuntime) -> float:
    """Enqueue `items` runs of `task`, then time one worker emptying the queue."""
    await task.enqueue_many(range(items))
    worker = Worker(app, spark=runtime)
    began = time.monotonic()
    job = asyncio.create_task(worker.run())
    while worker.stats["succeeded"] < items:
        await asyncio.sleep(0.05)
    took = time.monotonic() - began
    worker.stop()
    await job
    return took


async def measure(url: str, args: argparse.Namespace, runtime: SparkRuntime) -> dict[str, float]:
    results: dict[str, float] = {}
    for shape in ("batch", "plain"):
        app = App(url=url, prefix="b" + uuid.uuid4().hex[:8])
        if shape == "batch":
            task = app.batch_task(batch_size=args.batch_size, max_wait=0.5)(square)
            await drain(app, task, args.batch_size, runtime)  # warm the executors' workers
            await app.aclose()
            app = App(url=url, prefix="b" + uuid.uuid4().hex[:8])
            task = app.batch_task(batch_size=args.batch_size, max_wait=0.5)(square)
        else:
            task = app.task(square)
        seconds = await drain(app, task, args.items, runtime)
        results[f"{shape} items/s"] = args.items / seconds
        await app.aclose()
    return results


CPU_MODES = {
    "threads, 1 worker process": ("in_thread", ["-q", "threads"]),
    'executor="process", 1 worker': ("in_process", ["-q", "procs", "--pool-size", "2"]),
    "Spark batch task, local[2]": ("in_spark", ["-q", "spark"]),
}


async def cpu_bound(items: int, seconds: float) -> dict[str, float]:
    """Items/s of `items` pure-Python items of `seconds` each, per CPU_MODES entry, each in
    a `taskq worker` subprocess (the Spark one warmed up first: its session's start-up is
    paid once per worker, not per backlog)."""
    from bench.cpu import rounds_for
    from bench.processes import measure

    rounds = rounds_for(seconds)
    # Spark's Python workers import the item's module (bench.cpu) from the repository
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    os.environ["TASKQ_SPARK_MASTER"] = "local[2]"
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store_dir=store) as server:
        return {
            mode: await measure(server.url, task, args, items, rounds, warm=task == "in_spark")
            for mode, (task, args) in CPU_MODES.items()
        }


def total(spark: Any) -> int:
    """A job task's whole job: one small aggregate."""
    return int(spark.range(1000).selectExpr("sum(id) AS s").first()["s"])


async def job_latency(url: str, runtime: SparkRuntime, runs: int = 7) -> list[float]:
    """Seconds from enqueue to result of a small Spark job task on a warm session."""
    app = App(url=url, prefix="j" + uuid.uuid4().hex[:8])
    task = app.task(executor="spark")(total)
    worker = Worker(app, spark=runtime)
    job = asyncio.create_task(worker.run())
    await worker.wait_ready()
    took = []
    for _ in range(runs + 1):  # the first warms the session's code paths
        began = time.monotonic()
        await (await task.enqueue()).result(timeout=120)
        took.append(time.monotonic() - began)
    worker.stop()
    await job
    await app.aclose()
    return sorted(took[1:])


async def on_master(
    url: str, master: str, args: argparse.Namespace, frames: bool = False
) -> dict[str, float]:
    """Session start, job latency and batch items/s on one master (`frames`: batches through
    the DataFrame API, as over Connect, on a classic session too)."""
    runtime = SparkRuntime(App(spark_master=master).settings)
    runtime.frames = runtime.frames or frames
    began = time.monotonic()
    await runtime.session()
    startup = time.monotonic() - began
    latency = await job_latency(url, runtime)
    app = App(url=url, prefix="c" + uuid.uuid4().hex[:8])
    task = app.batch_task(batch_size=args.batch_size, max_wait=0.5)(square)
    await drain(app, task, args.batch_size, runtime)  # warm the Python workers
    seconds = await drain(app, task, args.items, runtime)
    await app.aclose()
    await runtime.stop()
    return {
        "start": startup,
        "p50": latency[len(latency) // 2],
        "max": latency[-1],
        "rate": args.items / seconds,
    }


def connect_compare(args: argparse.Namespace) -> str:
    """The --connect table: local[2] beside a Connect server on this machine."""
    from tests.spark.connect_server import ConnectServer

    rows = {}
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store_dir=store) as server:
        rows["local[2], RDD batches"] = run_async(on_master(server.url, "local[2]", args))
        rows["local[2], DataFrame batches"] = run_async(
            on_master(server.url, "local[2]", args, frames=True)
        )
        with tempfile.TemporaryDirectory() as folder, ConnectServer(Path(folder)) as connect:
            rows["Spark Connect (server on local[2])"] = run_async(
                on_master(server.url, connect.url, args)
            )
            started = connect.started[0]
    lines = [
        f"{args.items:,} trivial batch items (batch_size {args.batch_size}) and a small job "
        f"task · {os.cpu_count()} cores · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| master | session start | job task p50 / max (s) | batch items/s | per item |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['start']:.2f} s | {row['p50']:.3f} / {row['max']:.3f} | "
            f"{row['rate']:,.0f} | {1e6 / row['rate']:,.0f} µs |"
        )
    lines += ["", f"The Connect server itself started in {started:.1f} s (not in the table)."]
    return "\n".join(lines) + "\n"


def cpu_table(rates: dict[str, float], items: int, seconds: float) -> str:
    base = rates["threads, 1 worker process"]
    lines = [
        f"{items} items of {seconds * 1000:.0f} ms pure Python · {os.cpu_count()} cores · "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| mode | items/s | ratio to threads | target |",
        "|---|---|---|---|",
    ]
    for mode, rate in rates.items():
        target = ">= 1.7" if mode.startswith("Spark") else ""
        lines.append(f"| {mode} | {rate:,.1f} | {rate / base:.2f} | {target} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description="Spark batch tasks vs plain tasks")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--cpu", action="store_true", help="items burning ~5 ms of CPU each (default 2,000)"
    )
    parser.add_argument("--seconds", type=float, default=0.005, help="CPU per item (--cpu)")
    parser.add_argument("--connect", action="store_true", help="local[2] beside Spark Connect")
    args = parser.parse_args()
    if args.connect:
        text = connect_compare(args)
        print(text)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "spark-connect.md").write_text(text)
        return
    if args.cpu:
        items = args.items if args.items != 100_000 else 2000
        text = cpu_table(asyncio.run(cpu_bound(items, args.seconds)), items, args.seconds)
        print(text)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "spark-cpu.md").write_text(text)
        return
    runtime = SparkRuntime(App(spark_master=args.master).settings)
    began = time.monotonic()
    runtime.start()
    startup = time.monotonic() - began
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store_dir=store) as server:
        results = run_async(measure(server.url, args, runtime))
    asyncio.run(runtime.stop())
    print(f"spark session start-up ({args.master}): {startup:.1f}s")
    for name, value in results.items():
        print(f"{args.items} items, {name}: {value:,.0f}")


if __name__ == "__main__":
    main()
