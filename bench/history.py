"""What the history costs (docs/dashboard.md, "History"): per task on the worker, per
flush on the server, in storage, and what its pages cost to serve with 1,000 task names.

    python -m bench.history [--tasks 200000] [--names 1000] [--requests 20]

- record: the settle path's share (the attempt's run time, one list append), µs per task;
- fold: a flush binning and merging what was settled, µs per task (10 task names);
- flush: windows stored per flush (compare-and-set, against a real nats-server) for 10 and
  for `--names` task names, ms per flush and windows per second;
- storage: bytes per stored window (the stream's bytes over its messages);
- pages: `taskq dashboard` (a subprocess) serving the overview, a queue page and a task's
  page with `--names` task names in the history and in a live worker's record, p50/max ms.

Writes bench/results/history.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from bench.run import main_with, measures, spawn
from taskq import App
from taskq.records.heartbeats import ensure_workers, started_record
from taskq.server import EmbeddedServer
from taskq.workers.history import HistoryFeed
from taskq.workers.job import Job


def record_cost(n: int) -> float:
    """µs per task of what the settle path adds: `job.ran` and one append."""
    pending: defaultdict[tuple[str, str, str], list[float]] = defaultdict(list)
    job = Job.__new__(Job)
    job.started, job.queue = time.monotonic(), "default"
    names = [f"t{i % 10}" for i in range(n)]
    began = time.perf_counter()
    for name in names:
        job.ran = time.monotonic() - job.started
        pending[(job.queue, name, "s")].append(job.ran)
    return (time.perf_counter() - began) / n * 1e6


async def fold_and_flush(url: str, tasks: int, names: int) -> tuple[float, float, int]:
    """(fold µs per task, flush ms, windows stored) for `tasks` settled over `names` names."""
    app = App(url=url, prefix=f"h{names}")
    client = await app.client()
    feed = HistoryFeed(client)
    for i in range(tasks):
        feed.pending[("default", f"t{i % names}", "s")].append(0.001 * (i % 50))
    began = time.perf_counter()
    feed._fold(time.time())
    fold = (time.perf_counter() - began) / tasks * 1e6
    windows = len(feed._unsent)
    began = time.perf_counter()
    await feed.flush()
    flush = (time.perf_counter() - began) * 1000
    await app.aclose()
    return fold, flush, windows


async def storage(url: str, prefix: str) -> float:
    """Bytes per stored window of the history stream of `prefix`."""
    app = App(url=url, prefix=prefix)
    client = await app.client()
    state = await client.connection.streams.state(app.names.history_stream)
    await app.aclose()
    return state.bytes / max(1, state.messages)


async def listed_worker(url: str, prefix: str, names: int) -> None:
    """A live worker's record naming `names` tasks of `default` (what the queue page lists)."""
    app = App(url=url, prefix=prefix)

    @app.task(name="t0")
    def t0() -> None: ...

    await t0.enqueue()  # the queue exists (its page lists it)
    client = await app.client()
    await ensure_workers(client)
    tasks = [f"default:t{i}" for i in range(names)]
    record = started_record(["default"], 16, None, "bench", tasks)
    await client.connection.kv.put(
        app.names.workers_bucket, record.key, record.model_dump_json().encode()
    )
    await app.aclose()


def page_times(base: str, path: str, requests: int) -> tuple[float, float]:
    times = []
    for _ in range(requests):
        began = time.perf_counter()
        with urllib.request.urlopen(base + path, timeout=30) as reply:
            reply.read()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), max(times)


async def pages(url: str, prefix: str, requests: int) -> dict[str, tuple[float, float]]:
    argv = ["--url", url, "--prefix", prefix, "dashboard", "--port", "0"]
    board = spawn([sys.executable, "-m", "taskq", *argv])
    try:
        base = ""
        assert board.stdout is not None
        for line in board.stdout:
            if " at http://" in line:
                base = line.split(" at ", 1)[1].split()[0].rstrip("/")
                break
        paths = [
            "/",
            "/queues/default",
            "/history?task=t500",
            "/api/history?task=t500",
            "/history?span=24h",
        ]
        page_times(base, "/", 2)  # warm
        return {p: await asyncio.to_thread(page_times, base, p, requests) for p in paths}
    finally:
        board.terminate()
        board.wait(10)


async def measure(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory() as store:
        server = EmbeddedServer(store_dir=Path(store)).start()
        try:
            record = record_cost(args.tasks)
            small = await fold_and_flush(server.url, args.tasks, 10)
            large = await fold_and_flush(server.url, args.tasks, args.names)
            per_window = await storage(server.url, f"h{args.names}")
            await listed_worker(server.url, f"h{args.names}", args.names)
            served = await pages(server.url, f"h{args.names}", args.requests)
        finally:
            server.stop()
    return render(args, record, small, large, per_window, served)


def render(args, record, small, large, per_window, served) -> str:  # type: ignore[no-untyped-def]
    rows = [
        ("record, on the settle path", f"{record:.3f} µs per task"),
        ("fold at flush (10 names)", f"{small[0]:.3f} µs per task"),
        ("flush, 10 names", f"{small[1]:.1f} ms for {small[2]} windows"),
        (
            f"flush, {args.names} names",
            f"{large[1]:.1f} ms for {large[2]} windows"
            f" ({large[2] / large[1] * 1000:,.0f} windows/s)",
        ),
        ("storage per window", f"{per_window:.0f} B"),  # the stream's, headers included
        ("a series busy all day (360 + 288 windows)", f"{per_window * 648 / 1024:.0f} KiB"),
    ]
    rows += [
        (f"page {p} ({args.names} names)", f"p50 {m:.1f} ms, max {x:.1f} ms")
        for p, (m, x) in served.items()
    ]
    return measures(f"history costs · {args.tasks:,} tasks", rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--names", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=20)
    main_with("history.md", measure, parser)


if __name__ == "__main__":
    main()
