"""taskq beside the raw nats-py floor, on one nats-server, in one run.

    python -m bench.run [--runs 3] [--drain 20000] [--enqueue 5000] [--latency 1000]
                        [--no-durable | --durable-only]

Starts its own nats-server (temporary store), measures each scenario for taskq and for a raw
nats-py work-queue loop, takes the median of `--runs`, prints a table with the ratio, and
writes bench/results/latest.json and latest.md. Absolute numbers on shared machines are noise;
the ratios within one run are what count.

Then the durable configuration: a second server, on the same machine and disk, that fsyncs
every write before acknowledging it (`sync_interval: always`, the shipped configs'); enqueue,
bulk enqueue, a one-process drain and latency, each beside the raw loop on that durable
server; and per scenario what `always` costs against the default server of the same run
(rate ratio and extra microseconds per task).

The targets against the raw loop: default sync, enqueue one by one >= 0.95x,
bulk >= 0.8x, a one-process drain with result records >= 0.5x, p50 <= 1.0x; durable, p50
<= 1.2x. The targets against the peers are `bench/peers.py`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nats
import psutil

from taskq import App
from taskq.server import EmbeddedServer, find_binary
from taskq.topology.specs import queue_consumer, queue_stream
from taskq.workers import Worker

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
BODY = b"x" * 100


@dataclass
class Row:
    metric: str
    unit: str
    taskq: float
    raw: float
    target: str
    ratio: float = 0.0
    ok: bool | None = None


def ratio_ok(row: Row, higher_is_better: bool, bound: float) -> Row:
    row.ratio = row.taskq / row.raw if row.raw else 0.0
    row.ok = row.ratio >= bound if higher_is_better else row.ratio <= bound
    return row


def fresh_prefix() -> str:
    return "b" + uuid.uuid4().hex[:8]


# -- enqueue ------------------------------------------------------------------------------
async def taskq_enqueue_one_by_one(url: str, n: int) -> float:
    from bench.apps import noop

    app = noop.app
    app.configure(url=url, prefix=fresh_prefix())
    await (await app.client()).ensure_queue("default")
    await noop.enqueue()  # warm: connection, validator
    start = time.perf_counter()
    for i in range(n):
        await noop.enqueue(i)
    took = time.perf_counter() - start
    await app.aclose()
    return n / took


async def raw_enqueue_one_by_one(url: str, n: int) -> float:
    nc, js, subject = await raw_stream(url)
    start = time.perf_counter()
    for _ in range(n):
        await js.publish(subject, BODY)
    took = time.perf_counter() - start
    await nc.close()
    return n / took


async def taskq_enqueue_bulk(url: str, n: int) -> float:
    from bench.apps import noop

    app = noop.app
    app.configure(url=url, prefix=fresh_prefix())
    await (await app.client()).ensure_queue("default")
    await noop.enqueue()
    start = time.perf_counter()
    await noop.enqueue_many(range(n))
    took = time.perf_counter() - start
    await app.aclose()
    return n / took


async def raw_enqueue_bulk(url: str, n: int) -> float:
    nc, js, subject = await raw_stream(url)
    start = time.perf_counter()
    for chunk in range(0, n, 2048):
        futures = [await js.publish_async(subject, BODY) for _ in range(min(2048, n - chunk))]
        await asyncio.gather(*futures)
    took = time.perf_counter() - start
    await nc.close()
    return n / took


async def raw_stream(url: str) -> tuple[Any, Any, str]:
    prefix = fresh_prefix()
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=f"RAW_{prefix}", subjects=[f"{prefix}.>"], retention="workqueue")
    return nc, js, f"{prefix}.job"


# -- drain ----------------------------------------------------------------------------------
async def fill_backlog(url: str, n: int, queue: str = "default") -> tuple[App, str]:
    """A queue with `n` no-op tasks waiting, and its consumer created (taskq's config):
    `default` holds `noop` (defaults), `lean` holds `lean` (store_result=False)."""
    from bench.apps import lean, noop

    task = lean if queue == "lean" else noop
    prefix = fresh_prefix()
    app = App(url=url, prefix=prefix)
    app.tasks[task.name] = task
    producer = task.app
    producer.configure(url=url, prefix=prefix)
    await task.enqueue_many(range(n))
    await producer.aclose()
    broker = (await app.client()).connection
    spec = queue_consumer(app.names, app.settings, queue, task.ack_wait, task.policy.attempts)
    await broker.streams.ensure(queue_stream(app.names, app.settings, queue))
    await broker.streams.ensure_consumer(spec)
    return app, prefix


async def drain(
    url: str, n: int, procs: int, raw: bool, queue: str = "default"
) -> tuple[float, list[float]]:
    """Tasks/s for `procs` consumer processes to empty a backlog of `n` on `queue`; and
    their RSS (MB)."""
    app, prefix = await fill_backlog(url, n, queue)
    stream = app.names.queue_stream(queue)
    broker = (await app.client()).connection
    if raw:
        cmd = [sys.executable, "-m", "bench.raw_consumer", url, stream, queue]
        marker = "ready"
    else:
        cmd = [
            sys.executable,
            "-m",
            "taskq",
            "--url",
            url,
            "--prefix",
            prefix,
            "worker",
            "bench.apps:app",
            "-q",
            queue,
        ]
        marker = "worker ready"
    children = [spawn(cmd) for _ in range(procs)]
    try:
        rate, _ = await asyncio.gather(
            steady_rate(lambda: remaining(broker, [stream]), n), wait_marker(children, marker)
        )
        rss = [psutil.Process(c.pid).memory_info().rss / 2**20 for c in children]
    finally:
        for child in children:
            child.kill()
            child.wait()
        await app.aclose()
    return rate, rss


async def rss_over(url: str, n: int) -> tuple[float, float]:
    """A `taskq worker` process's RSS (MB) once it ran the first 10% of `n` tasks, and once
    it ran them all: flat means the worker keeps nothing per task."""
    app, prefix = await fill_backlog(url, n)
    stream = app.names.queue_stream("default")
    broker = (await app.client()).connection
    cmd = [sys.executable, "-m", "taskq", "--url", url, "--prefix", prefix, "worker"]
    child = spawn([*cmd, "bench.apps:app"])
    try:
        await wait_marker([child], "worker ready")
        memory = psutil.Process(child.pid)
        while await remaining(broker, [stream]) > 0.9 * n:
            await asyncio.sleep(0.01)
        early = memory.memory_info().rss / 2**20
        while await remaining(broker, [stream]) > 0:
            await asyncio.sleep(0.05)
        late = memory.memory_info().rss / 2**20
    finally:
        child.kill()
        child.wait()
        await app.aclose()
    return early, late


async def remaining(broker: Any, streams: list[str]) -> int:
    return sum([(await broker.streams.state(s)).messages for s in streams])


async def steady_rate(count: Callable[[], Awaitable[int]], n: int) -> float:
    """Tasks/s while the backlog of `n` goes from 90% to 10%: consumers start one after
    another, so the first would drain alone for a while; the middle of the drain is when
    all of them run."""
    t90 = t10 = 0.0
    deadline = time.monotonic() + 900
    while (left := await count()) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"backlog not drained: {left} left")
        now = time.perf_counter()
        if left > 0.9 * n:
            t90 = now
        elif left > 0.1 * n:
            t10 = now
        await asyncio.sleep(0.01)
    t10 = t10 or time.perf_counter()
    return 0.8 * n / max(t10 - t90, 1e-3)


def spawn(cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )


async def wait_marker(children: list[subprocess.Popen[str]], marker: str) -> None:
    for child in children:
        assert child.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = await asyncio.to_thread(child.stdout.readline)
            if marker in line:
                break
            if not line and child.poll() is not None:
                raise RuntimeError(f"consumer exited: {child.returncode}")
        # keep draining its output so a chatty worker never blocks on a full pipe
        asyncio.get_running_loop().run_in_executor(None, child.stdout.read)


# -- latency --------------------------------------------------------------------------------
async def taskq_latency(url: str, n: int) -> list[float]:
    app = App(url=url, prefix=fresh_prefix())
    done: list[asyncio.Future[None]] = []

    @app.task
    async def ping() -> None:
        done[-1].set_result(None)

    samples: list[float] = []
    with_worker = Worker(app, concurrency=16)
    runner = asyncio.create_task(with_worker.run())
    await with_worker.wait_ready()
    for i in range(n + 20):
        done.append(asyncio.get_running_loop().create_future())
        start = time.perf_counter()
        await ping.enqueue()
        await done[-1]
        if i >= 20:  # warm-up
            samples.append(time.perf_counter() - start)
    with_worker.stop()
    await runner
    await app.aclose()
    return samples


async def raw_latency(url: str, n: int) -> list[float]:
    nc, js, subject = await raw_stream(url)
    stream = f"RAW_{subject.split('.')[0]}"
    await js.add_consumer(stream, durable_name="c", ack_policy="explicit")
    sub = await js.pull_subscribe_bind(durable="c", stream=stream)
    done: list[asyncio.Future[None]] = []

    async def consume() -> None:
        while True:
            try:
                msgs = await sub.fetch(16, timeout=1)
            except nats.errors.TimeoutError:
                continue
            for msg in msgs:
                done[-1].set_result(None)
                await msg.ack()

    consumer = asyncio.create_task(consume())
    samples: list[float] = []
    for i in range(n + 20):
        done.append(asyncio.get_running_loop().create_future())
        start = time.perf_counter()
        await js.publish(subject, BODY)
        await done[-1]
        if i >= 20:
            samples.append(time.perf_counter() - start)
    consumer.cancel()
    await nc.close()
    return samples


def measures(title: str, rows: list[tuple[str, str]]) -> str:
    """A results file of `rows` (measure, value) under `title`, stamped with the time."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"{title} · 2 cores · {stamp}", "", "| measure | value |", "|---|---|"]
    return "\n".join(lines + [f"| {a} | {b} |" for a, b in rows]) + "\n"


def main_with(
    name: str,
    measure: Callable[[argparse.Namespace], Awaitable[str]],
    parser: argparse.ArgumentParser,
) -> None:
    """Parse the arguments, measure, write bench/results/<name> and print it."""
    text = asyncio.run(measure(parser.parse_args()))
    (RESULTS / name).write_text(text)
    print(text)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the durable configuration --------------------------------------------------------------
DURABLE = ", sync always"


async def measure_durable(url: str, args: argparse.Namespace) -> list[Row]:
    """Enqueue, bulk enqueue and a one-process drain on the server at `url` (which fsyncs
    every write), each beside the raw nats-py loop on that same server."""
    r, n, one = args.runs, args.drain, args.enqueue
    pairs: list[tuple[str, Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]]] = [
        (
            "enqueue one-by-one",
            lambda: taskq_enqueue_one_by_one(url, one),
            lambda: raw_enqueue_one_by_one(url, one),
        ),
        ("bulk enqueue", lambda: taskq_enqueue_bulk(url, n), lambda: raw_enqueue_bulk(url, n)),
        (
            "drain, 1 worker process",
            lambda: drain_rate(url, n, False),
            lambda: drain_rate(url, n, True),
        ),
    ]
    rows = []
    for name, ours, floor in pairs:
        row = Row(
            name + DURABLE, "tasks/s", await median_of(r, ours), await median_of(r, floor), "(info)"
        )
        row.ratio = row.taskq / row.raw
        rows.append(row)
    return rows + await latencies(url, args, 1.2, DURABLE)


async def drain_rate(url: str, n: int, raw: bool) -> float:
    return (await drain(url, n, 1, raw))[0]


def fsync_cost(default: list[Row], durable: list[Row]) -> list[Row]:
    """Per scenario measured on both servers: the durable rate over the default's, and the
    microseconds `always` adds to each task (taskq's, and the raw loop's)."""
    by_name = {row.metric: row for row in default}
    rows: list[Row] = []
    for row in durable:
        base = by_name.get(row.metric.removesuffix(DURABLE))
        if base is None or row.unit != "tasks/s":
            continue
        slower = Row(
            f"{base.metric}: always / default",
            "x",
            row.taskq / base.taskq,
            row.raw / base.raw,
            "(info)",
        )
        extra = Row(
            f"{base.metric}: always adds",
            "µs/task",
            1e6 / row.taskq - 1e6 / base.taskq,
            1e6 / row.raw - 1e6 / base.raw,
            "(info)",
        )
        for info in (slower, extra):
            info.ratio = info.taskq / info.raw if info.raw else 0.0
        rows += [slower, extra]
    return rows


# -- the run --------------------------------------------------------------------------------
async def median_of(runs: int, measure: Callable[[], Awaitable[float]]) -> float:
    return statistics.median([await measure() for _ in range(runs)])


async def measure_all(url: str, args: argparse.Namespace) -> list[Row]:
    r = args.runs
    rows: list[Row] = []
    rows.append(
        ratio_ok(
            Row(
                "enqueue one-by-one",
                "tasks/s",
                await median_of(r, lambda: taskq_enqueue_one_by_one(url, args.enqueue)),
                await median_of(r, lambda: raw_enqueue_one_by_one(url, args.enqueue)),
                ">= 0.95",
            ),
            True,
            0.95,
        )
    )
    rows.append(
        ratio_ok(
            Row(
                "bulk enqueue",
                "tasks/s",
                await median_of(r, lambda: taskq_enqueue_bulk(url, args.drain)),
                await median_of(r, lambda: raw_enqueue_bulk(url, args.drain)),
                ">= 0.8",
            ),
            True,
            0.8,
        )
    )
    drains: dict[tuple[int, bool], float] = {}
    rss: list[float] = []
    for procs in (1, 2):
        for raw in (False, True):
            values = []
            for _ in range(r):
                rate, mem = await drain(url, args.drain, procs, raw)
                values.append(rate)
                if not raw and procs == 1:
                    rss += mem
            drains[(procs, raw)] = statistics.median(values)
    rows.append(
        ratio_ok(
            Row(
                "drain, 1 worker process",
                "tasks/s",
                drains[(1, False)],
                drains[(1, True)],
                ">= 0.5",
            ),
            True,
            0.5,
        )
    )
    lean = [(await drain(url, args.drain, 1, False, "lean"))[0] for _ in range(r)]
    lean_raw = [(await drain(url, args.drain, 1, True, "lean"))[0] for _ in range(r)]
    rows.append(
        ratio_ok(
            Row(
                "drain, store_result=False",
                "tasks/s",
                statistics.median(lean),
                statistics.median(lean_raw),
                "(info)",
            ),
            True,
            0.0,
        )
    )
    rows.append(
        ratio_ok(
            Row(
                "drain, 2 worker processes",
                "tasks/s",
                drains[(2, False)],
                drains[(2, True)],
                "(info)",
            ),
            True,
            0.0,
        )
    )
    two = Row(
        "2 processes / 1 process",
        "x",
        drains[(2, False)] / drains[(1, False)],
        drains[(2, True)] / drains[(1, True)],
        "taskq >= 1.6",
    )
    two.ratio = two.taskq / two.raw
    two.ok = two.taskq >= 1.6
    rows.append(two)
    rows += await latencies(url, args, 1.0)
    if rss:
        rows.append(Row("worker RSS after a drain", "MB", statistics.median(rss), 0, "(info)"))
    early, late = await rss_over(url, args.rss_tasks)
    name = f"worker RSS after {args.rss_tasks:,} tasks (raw column: after the first 10%)"
    flat = Row(name, "MB", late, early, "<= +5 MB")
    flat.ratio = late / early
    flat.ok = late - early <= 5.0
    rows.append(flat)
    return rows


async def latencies(url: str, args: argparse.Namespace, bound: float, name: str = "") -> list[Row]:
    """p50 (its target: at most `bound` x the raw loop's) and p99, medians of the runs."""
    t_lat = [await taskq_latency(url, args.latency) for _ in range(args.runs)]
    r_lat = [await raw_latency(url, args.latency) for _ in range(args.runs)]
    rows = []
    for q, metric, most in ((0.5, "latency p50", bound), (0.99, "latency p99", 0.0)):
        t = statistics.median(percentile(s, q) for s in t_lat) * 1000
        w = statistics.median(percentile(s, q) for s in r_lat) * 1000
        row = Row(metric + name, "ms", t, w, f"<= {most}x" if most else "(info)")
        row.ratio = t / w
        row.ok = row.ratio <= most if most else None
        rows.append(row)
    return rows


def render(rows: list[Row], meta: dict[str, Any]) -> str:
    lines = [
        f"taskq {meta['taskq']} · nats-server {meta['server']} · {meta['cpus']} cores · "
        f"median of {meta['runs']} runs · {meta['date']}",
        "",
        "| metric | unit | taskq | raw nats-py | ratio | target | ok |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ok = "" if row.ok is None else ("yes" if row.ok else "NO")
        raw = f"{row.raw:,.2f}" if row.raw else "-"
        ratio = f"{row.ratio:.2f}" if row.raw else "-"
        lines.append(
            f"| {row.metric} | {row.unit} | {row.taskq:,.2f} | {raw} | {ratio} | "
            f"{row.target} | {ok} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--enqueue", type=int, default=5_000)
    parser.add_argument("--latency", type=int, default=1_000)
    parser.add_argument("--rss-tasks", type=int, default=100_000, help="tasks for the RSS row")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--no-durable", action="store_true", help="skip the sync-always server")
    which.add_argument("--durable-only", action="store_true", help="only the sync-always server")
    args = parser.parse_args()
    import taskq

    version = subprocess.run([find_binary(), "--version"], capture_output=True, text=True)
    rows: list[Row] = []
    if not args.durable_only:
        with EmbeddedServer(store_dir=tempfile.mkdtemp(prefix="taskq-bench-")) as server:
            rows = asyncio.run(measure_all(server.url, args))
    if not args.no_durable:
        store = tempfile.mkdtemp(prefix="taskq-bench-durable-")  # the same disk as above
        with EmbeddedServer(store_dir=store, sync="always") as server:
            durable = asyncio.run(measure_durable(server.url, args))
        rows += durable + fsync_cost(rows, durable)
    meta = {
        "taskq": taskq.__version__,
        "server": version.stdout.strip(),
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": vars(args),
    }
    table = render(rows, meta)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(
        json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=2)
    )
    (RESULTS / "latest.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
