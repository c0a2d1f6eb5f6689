"""Durable workflows beside the same work as a chain of tasks, in one run on an embedded
server with one in-process worker (docs/workflows.md).

    python -m bench.workflows                   # the default sizes (a few minutes)
    python -m bench.workflows --steps 200 --gather 1000 --sleepers 1000   # a quick look
    python -m bench.workflows --canvas-only     # a 10,000-member group, a 20,000-member chord
                                                # alone (bench/results/canvas.md)

Prints and writes bench/results/workflows.md:
- a group of G no-op tasks and a chord of C, end to end (their marks in the workflows
  stream beside the journals);
- a sequential workflow of N no-op steps against a chain of the same N tasks, for N and
  N/4 and N/2 (time grows linearly with steps if the per-step time stays flat), and a
  step's overhead end to end (workflow time per step minus chain time per task);
- `wf.gather` of M no-op steps: time, fan-in once, the worker's RSS growth;
- S runs sleeping at once (started 100 at a time, each sleeping the same time): the worker's
  RSS before, while they sleep and after (flat: no slot or task held per sleeping run), the
  tasks it held while they slept, and how late each woke after its own timer (p50/p99/max).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.run import RESULTS, fresh_prefix
from taskq import App, Workflow, chain, chord, group
from taskq.cli.main import run_async
from taskq.records.heartbeats import list_workers
from taskq.records.results import fetch
from taskq.server import EmbeddedServer
from taskq.workers import Worker


def _rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _app(url: str) -> tuple[App, Any, Any, Any]:
    app = App(url=url, prefix=fresh_prefix())

    @app.task
    async def noop(i: Any = 0) -> Any:
        return i

    @app.workflow
    async def sequential(wf: Workflow, steps: int) -> int:
        total = 0
        for i in range(steps):
            total += await wf.run(noop, i)
        return total

    @app.workflow
    async def fan(wf: Workflow, steps: int) -> int:
        return sum(await wf.gather(*(wf.run(noop, i) for i in range(steps))))

    return app, noop, sequential, fan


async def _sequential(url: str, steps: int) -> tuple[float, float]:
    """Seconds for a workflow of `steps` steps, and for a chain of as many tasks."""
    app, noop, sequential, _ = _app(url)
    async with _worker(app):
        began = time.perf_counter()
        run = await sequential.start(steps)
        await run.result(timeout=3600)
        workflow = time.perf_counter() - began
        began = time.perf_counter()
        handle = await chain(noop.s(0), *(noop.s() for _ in range(steps - 1))).enqueue()
        await handle.result(timeout=3600)
        chained = time.perf_counter() - began
    await app.aclose()
    return workflow, chained


async def _gather(url: str, steps: int) -> tuple[float, float]:
    """Seconds for a gather of `steps` steps, and the worker's RSS growth (MB)."""
    app, _, _, fan = _app(url)
    async with _worker(app):
        before = _rss_mb()
        began = time.perf_counter()
        run = await fan.start(steps)
        assert await run.result(timeout=3600) == sum(range(steps))
        took = time.perf_counter() - began
        grew = _rss_mb() - before
    await app.aclose()
    return took, grew


async def _canvases(url: str, members: int, chorded: int) -> tuple[float, float]:
    """Seconds for a group of `members` no-op tasks and for a chord of `chorded`, end to
    end (their marks in the workflows stream, taskq.workflows.marks)."""
    app, noop, _, _ = _app(url)
    async with _worker(app):
        began = time.perf_counter()
        handle = await group(*(noop.s(i) for i in range(members))).enqueue()
        assert await handle.result(timeout=3600) == list(range(members))
        grouped = time.perf_counter() - began
        began = time.perf_counter()
        final = await chord(group(*(noop.s(i) for i in range(chorded))), noop.s()).enqueue()
        assert len(await final.result(timeout=3600)) == chorded
        took = time.perf_counter() - began
    await app.aclose()
    return grouped, took


@dataclass
class Sleepers:
    """What `runs` runs sleeping at once cost the worker, and how late they woke."""

    rss_before: float  # the worker process's RSS, MB, before the runs start...
    rss_asleep: float  # ...once all sleep, and once all woke
    rss_after: float
    held: int  # tasks the worker held while they all slept (slots taken)
    late: list[float]  # each run's wake time minus its timer's due time, s, sorted
    started_in: float  # seconds to start them all
    woke_in: float  # seconds from the first wake to the last


async def _sleepers(url: str, runs: int, seconds: float) -> Sleepers:
    """Start `runs` runs that each sleep `seconds`, 100 starts at a time, on a worker
    process of their own (its RSS is read from /proc)."""
    from bench import sleepers_app

    prefix = fresh_prefix()
    sleepers_app.app.configure(url=url, prefix=prefix)
    worker = _worker_process(url, prefix)
    try:
        await _ready(sleepers_app.app)
        before = _rss_mb(worker.pid)
        began = time.perf_counter()
        started: list[Any] = []
        for first in range(0, runs, 100):
            batch = range(first, min(first + 100, runs))
            started += await asyncio.gather(*(sleepers_app.nap.start(seconds) for _ in batch))
        started_in = time.perf_counter() - began
        await _all_asleep(started)
        asleep, held = _rss_mb(worker.pid), await _held(sleepers_app.app)
        # the runs note their own lateness; waiting for them all by count (one request a
        # poll) keeps the bench's own load off the server while they wake
        await _all_ended(sleepers_app.app, len(started))
        woke_in = time.perf_counter() - began - seconds
        after = _rss_mb(worker.pid)
        records = [await fetch(sleepers_app.app, run.id) for run in started]
        late = sorted(float(r.result) for r in records if r is not None)
    finally:
        worker.terminate()
        worker.wait(30)
        await sleepers_app.app.aclose()
    return Sleepers(before, asleep, after, held, late, started_in, woke_in)


def _worker_process(url: str, prefix: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "taskq", "--url", url, "--prefix", prefix, "worker"]
    argv += ["bench.sleepers_app:app", "-c", "64"]
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    quiet = subprocess.DEVNULL
    return subprocess.Popen(argv, cwd=root, env=env, stdout=quiet, stderr=quiet)


async def _ready(app: App) -> None:
    """Wait until the worker process heartbeats."""
    for _ in range(600):
        if await list_workers(app):
            return
        await asyncio.sleep(0.1)
    raise SystemExit("the sleepers' worker process did not start")


async def _held(app: App) -> int:
    """The fewest tasks the worker process ran at once over its next heartbeats (the last
    decisions of the starts may still be finishing: a sleeping run itself holds none)."""
    fewest = None
    for _ in range(6):
        running = sum(len(w.running) for w in await list_workers(app))
        fewest = running if fewest is None else min(fewest, running)
        await asyncio.sleep(0.5)
    return fewest or 0


async def _all_ended(app: App, runs: int) -> None:
    client = await app.client()
    for _ in range(7200):
        buckets = client.results.configured
        if sum([await client.connection.kv.count(b, ">") for b in buckets]) >= runs:
            return
        await asyncio.sleep(0.5)


async def _all_asleep(runs: list[Any]) -> None:
    """Wait until every run's first decision recorded its sleep (its summary says so)."""
    awake = list(runs)
    for _ in range(600):
        states = await asyncio.gather(*(run.status() for run in awake))
        done = ("sleeping", "succeeded")
        awake = [run for run, state in zip(awake, states, strict=True) if state not in done]
        if not awake:
            return
        await asyncio.sleep(0.5)


class _worker:
    """One in-process worker for the block."""

    def __init__(self, app: App) -> None:
        self.worker = Worker(app, concurrency=64, sweeper=False)
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Worker:
        self.task = asyncio.create_task(self.worker.run())
        await self.worker.wait_ready()
        return self.worker

    async def __aexit__(self, *_: object) -> None:
        self.worker.stop()
        assert self.task is not None
        await self.task


async def measure(url: str, args: argparse.Namespace) -> list[str]:
    lines = ["| measure | workflow | chain of tasks | ratio |", "|---|---|---|---|"]
    grouped, chorded = await _canvases(url, args.group, args.chord)
    lines += [
        f"| group of {args.group} tasks: s (tasks/s) | | {grouped:.2f}"
        f" ({args.group / grouped:.0f}) | |",
        f"| chord of {args.chord} tasks: s (tasks/s) | | {chorded:.2f}"
        f" ({args.chord / chorded:.0f}) | |",
    ]
    if args.canvas_only:
        return lines
    for steps in (args.steps // 4, args.steps // 2, args.steps):
        workflow, chained = await _sequential(url, steps)
        per_step, per_task = workflow / steps * 1000, chained / steps * 1000
        lines.append(
            f"| {steps} sequential steps: total s (ms per step) | {workflow:.2f} ({per_step:.2f})"
            f" | {chained:.2f} ({per_task:.2f}) | {workflow / chained:.2f} |"
        )
    lines.append(f"| a step's overhead over a chained task | {per_step - per_task:.2f} ms | | |")
    took, grew = await _gather(url, args.gather)
    lines.append(
        f"| gather of {args.gather} steps: s, worker RSS growth MB | {took:.2f}, {grew:.1f} | | |"
    )
    slept = await _sleepers(url, args.sleepers, args.sleep)
    n, late = args.sleepers, slept.late
    lines += [
        f"| {n} runs asleep: worker process RSS MB before / asleep / after waking"
        f" | {slept.rss_before:.1f} / {slept.rss_asleep:.1f} / {slept.rss_after:.1f} | | |",
        f"| tasks the worker held while they slept | {slept.held} | | |",
        f"| {n} starts took s (starts/s) | {slept.started_in:.1f} ({n / slept.started_in:.0f})"
        " | | |",
        f"| each woke after its timer by: p50 / p99 / max s | {late[n // 2]:.2f} /"
        f" {late[int(n * 0.99)]:.2f} / {late[-1]:.2f} | | |",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--gather", type=int, default=10_000)
    parser.add_argument("--sleepers", type=int, default=10_000)
    parser.add_argument("--sleep", type=float, default=60.0)
    parser.add_argument("--group", type=int, default=10_000)
    parser.add_argument("--chord", type=int, default=20_000)
    parser.add_argument("--canvas-only", action="store_true", help="the group and chord alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store_dir=store) as server:
        lines = run_async(measure(server.url, args))
    text = "\n".join(lines) + "\n"
    print(text)
    (RESULTS / ("canvas.md" if args.canvas_only else "workflows.md")).write_text(text)


if __name__ == "__main__":
    main()
