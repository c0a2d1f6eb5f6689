"""CPU-bound tasks: threads vs the process pool vs `taskq worker -p 2`, in one run.

    python -m bench.processes [--tasks 400] [--seconds 0.02] [--runs 3]

Starts its own nats-server; for each mode starts `taskq worker` in a subprocess, waits until
it is ready, enqueues `--tasks` tasks of `--seconds` pure-Python work, and times the drain.
Prints tasks/s per mode and the ratio to one worker running them in threads (the GIL lets
one thread compute at a time there), and writes bench/results/processes.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.run import RESULTS, fresh_prefix, remaining, spawn
from taskq.server import EmbeddedServer

MODES = {
    "threads, 1 worker process": ("in_thread", ["-q", "threads"]),
    'executor="process", 1 worker': ("in_process", ["-q", "procs"]),
    "threads, taskq worker -p 2": ("in_thread", ["-q", "threads", "-p", "2"]),
}


async def measure(
    url: str, task: str, args: list[str], n: int, rounds: int, *, warm: bool = False
) -> float:
    """Tasks/s for one worker command to run `n` tasks of `rounds` enqueued after it is
    ready (`warm`: after a first small backlog, drained untimed: a Spark session's start)."""
    from bench import cpu

    prefix = fresh_prefix()
    cmd = [sys.executable, "-m", "taskq", "--url", url, "--prefix", prefix, "worker"]
    worker = spawn([*cmd, "bench.cpu:app", *args])
    try:
        await ready(worker, 2 if "-p" in args else 1)
        cpu.app.configure(url=url, prefix=prefix)
        fn = cpu.app.tasks[task]
        stream = cpu.app.names.queue_stream(fn.queue)
        broker = (await cpu.app.client()).connection
        if warm:
            await fn.enqueue_many([(rounds,)] * 20)
            await drained(broker, stream)
        started = time.perf_counter()
        await fn.enqueue_many([(rounds,)] * n)
        await drained(broker, stream)
        return n / (time.perf_counter() - started)
    finally:
        await cpu.app.aclose()
        stop(worker)


async def drained(broker: Any, stream: str, within: float = 600) -> None:
    deadline = time.monotonic() + within
    while await remaining(broker, [stream]) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("backlog not drained")
        await asyncio.sleep(0.005)


async def ready(worker: subprocess.Popen[str], count: int) -> None:
    assert worker.stdout is not None
    seen, deadline, output = 0, time.monotonic() + 120, []
    while seen < count:
        line = await asyncio.to_thread(worker.stdout.readline)
        output.append(line)
        if not line or time.monotonic() > deadline:
            raise RuntimeError("worker did not become ready:\n" + "".join(output))
        seen += "worker ready" in line
    # keep reading its output so a full pipe never blocks it
    asyncio.get_running_loop().run_in_executor(None, worker.stdout.read)


def stop(worker: subprocess.Popen[str]) -> None:
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


async def main(n: int, seconds: float, runs: int) -> dict[str, float]:
    from bench.cpu import rounds_for

    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    rounds = rounds_for(seconds)  # the same work in every mode
    with (
        tempfile.TemporaryDirectory() as store,
        EmbeddedServer(store_dir=Path(store)) as server,
    ):
        for _ in range(runs):
            for mode, (task, args) in MODES.items():
                rates[mode].append(await measure(server.url, task, args, n, rounds))
    return {mode: statistics.median(values) for mode, values in rates.items()}


def table(rates: dict[str, float], n: int, seconds: float, runs: int) -> str:
    base = rates["threads, 1 worker process"]
    lines = [
        f"{n} tasks of {seconds * 1000:.0f} ms pure Python · {os.cpu_count()} cores · "
        f"median of {runs} · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| mode | tasks/s | ratio to threads | target |",
        "|---|---|---|---|",
    ]
    for mode, rate in rates.items():
        target = "" if mode.startswith("threads, 1") else ">= 1.7"
        lines.append(f"| {mode} | {rate:,.1f} | {rate / base:.2f} | {target} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=0.02)
    parser.add_argument("--runs", type=int, default=3)
    ns = parser.parse_args()
    result = asyncio.run(main(ns.tasks, ns.seconds, ns.runs))
    text = table(result, ns.tasks, ns.seconds, ns.runs)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "processes.md").write_text(text)
