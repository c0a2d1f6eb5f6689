"""Durable workflows beside the same work as a chain of tasks, in one run on an embedded
server with one in-process worker (docs/workflows.md).

    python -m bench.workflows                   # the default sizes (a few minutes)
    python -m bench.workflows --steps 200 --gather 1000 --sleepers 1000   # a quick look

Prints and writes bench/results/workflows.md:
- a sequential workflow of N no-op steps against a chain of the same N tasks, for N and
  N/4 and N/2 (time grows linearly with steps if the per-step time stays flat), and a
  step's overhead end to end (workflow time per step minus chain time per task);
- `wf.gather` of M no-op steps: time, fan-in once, the worker's RSS growth;
- S runs sleeping at once: the worker's RSS before and while they sleep (flat: no slot or
  task held per sleeping run), and how late the last of them woke after its timer.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from datetime import timedelta
from typing import Any

from bench.run import RESULTS, fresh_prefix
from taskq import App, Workflow, chain
from taskq.cli.main import run_async
from taskq.server import EmbeddedServer
from taskq.workers import Worker


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _app(url: str) -> tuple[App, Any, Any, Any, Any]:
    app = App(url=url, prefix=fresh_prefix())

    @app.task
    async def noop(i: int = 0) -> int:
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

    @app.workflow
    async def nap(wf: Workflow, seconds: float) -> float:
        await wf.sleep(timedelta(seconds=seconds))
        return time.time()

    return app, noop, sequential, fan, nap


async def _sequential(url: str, steps: int) -> tuple[float, float]:
    """Seconds for a workflow of `steps` steps, and for a chain of as many tasks."""
    app, noop, sequential, _, _ = _app(url)
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
    app, _, _, fan, _ = _app(url)
    async with _worker(app):
        before = _rss_mb()
        began = time.perf_counter()
        run = await fan.start(steps)
        assert await run.result(timeout=3600) == sum(range(steps))
        took = time.perf_counter() - began
        grew = _rss_mb() - before
    await app.aclose()
    return took, grew


async def _sleepers(url: str, runs: int, seconds: float) -> tuple[float, float, float]:
    """The worker's RSS before and while `runs` runs sleep, and how late the last woke."""
    app, _, _, _, nap = _app(url)
    async with _worker(app):
        before = _rss_mb()
        due = time.time() + seconds
        started = [await nap.start(seconds) for _ in range(runs)]
        asleep = _rss_mb()
        woke = [await run.result(timeout=3600) for run in started]
        late = max(woke) - due
    await app.aclose()
    return before, asleep, late


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
    before, asleep, late = await _sleepers(url, args.sleepers, args.sleep)
    asleep_line = f"| {args.sleepers} runs asleep: worker RSS MB before / while"
    lines.append(f"{asleep_line} | {before:.1f} / {asleep:.1f} | | |")
    lines.append(f"| the last of them woke after its timer by | {late:.2f} s | | |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--gather", type=int, default=10_000)
    parser.add_argument("--sleepers", type=int, default=10_000)
    parser.add_argument("--sleep", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store_dir=store) as server:
        lines = run_async(measure(server.url, args))
    text = "\n".join(lines) + "\n"
    print(text)
    (RESULTS / "workflows.md").write_text(text)


if __name__ == "__main__":
    main()
