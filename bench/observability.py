"""The cost of the ecosystem pieces (logs, metrics, test helpers), measured the way
bench/run.py measures drains.

    python -m bench.observability [--runs 3] [--drain 20000] [--lines 200000] [--tests 40]

- log line cost: µs per settled-task line, text vs `--log-format json` (the settle call's
  exact shape, through the buffered handler, to /dev/null);
- drain: a 20,000 no-op backlog emptied by `taskq worker` with `--log-format text`, `json`,
  and `text` plus `--metrics-port` (the OpenTelemetry SDK and its Prometheus reader), runs
  interleaved, median of `--runs`;
- the pytest plugin's overhead per test after the session's server start: a generated test
  file run by pytest as a user runs it, each test a `taskq.testing.worker` block (empty, or
  with one task) plus `drain()`; setup + call + teardown per test from `--durations`.

Writes bench/results/observability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench.run import RESULTS, fill_backlog, spawn, steady_rate, wait_marker
from taskq.ports import lease_port
from taskq.server import EmbeddedServer
from taskq.workers.logs import (
    BUFFERED,
    FORMAT,
    SETTLED,
    BufferedStreamHandler,
    CachedTimeFormatter,
    JsonFormatter,
)


# -- one log line ---------------------------------------------------------------------------
def line_cost(json_lines: bool, n: int) -> float:
    """µs per settled-task line, as workers/settle.py logs it, formatted and buffered."""
    sink = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(os.open(os.devnull, os.O_WRONLY), "w"), 1 << 16),
        write_through=False,
    )
    handler = BufferedStreamHandler(sink)
    handler.setFormatter(JsonFormatter() if json_lines else CachedTimeFormatter(FORMAT))
    log = logging.getLogger(f"bench.lines.{json_lines}")
    log.handlers, log.propagate = [handler], False
    log.setLevel(logging.INFO)
    start = time.perf_counter()
    for i in range(n):
        tid = f"01JBENCH{i:018d}"
        head = f"noop[{tid}] attempt 1/4"
        task = ("noop", tid, 1, "default", 0.000123)
        done = {BUFFERED: True, SETTLED: (*task, "succeeded", "")}
        log.info("succeeded %s in %.3fs", head, 0.000123, extra=done)
    took = time.perf_counter() - start
    handler.flush_now()
    return took / n * 1e6


# -- drain ----------------------------------------------------------------------------------
async def drain_rate(url: str, n: int, extra: list[str]) -> float:
    """Tasks/s of one `taskq worker bench.apps:app EXTRA...` emptying a backlog of `n`."""
    app, prefix = await fill_backlog(url, n)
    stream = app.names.queue_stream("default")
    broker = (await app.client()).connection
    cmd = [sys.executable, "-m", "taskq", "--url", url, "--prefix", prefix, "worker"]
    child = spawn([*cmd, "bench.apps:app", *extra])
    try:

        async def left() -> int:
            return (await broker.streams.state(stream)).messages

        rate, _ = await asyncio.gather(steady_rate(left, n), wait_marker([child], "ready"))
    finally:
        child.kill()
        child.wait()
        await app.aclose()
    return rate


async def drains(url: str, n: int, runs: int) -> dict[str, float]:
    variants = {
        "text": ["--log-format", "text"],
        "json": ["--log-format", "json"],
        "text + --metrics-port": ["--log-format", "text", "--metrics-port", "0"],
    }
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):  # interleaved: a slower spell of the machine hits every variant
        for name, extra in variants.items():
            if "--metrics-port" in extra:
                extra = [*extra[:-1], str(lease_port())]
            rates[name].append(await drain_rate(url, n, extra))
    return {name: statistics.median(values) for name, values in rates.items()}


# -- the pytest plugin --------------------------------------------------------------------
PLUGIN_TESTS = """
import json, os, time

import pytest

from taskq import App
from taskq.testing import worker

app = App()
STARTS = []


@app.task
async def noop() -> None:
    return None


@pytest.fixture(autouse=True)
def started():
    STARTS.append(time.perf_counter())


async def test_0_starts_the_server(taskq_server):
    async with worker(app) as w:
        await w.drain()


{tests}


def test_zz_report():
    with open(os.environ["STARTS"], "w") as out:
        json.dump(STARTS, out)
"""
KINDS = {
    "plain": "async def test_plain_{i}():\n    pass\n",
    "empty": (
        "async def test_empty_{i}(taskq_server):\n"
        "    async with worker(app) as w:\n"
        "        await w.drain()\n"
    ),
    "one_task": (
        "async def test_one_task_{i}(taskq_server):\n"
        "    async with worker(app) as w:\n"
        "        handle = await noop.enqueue()\n"
        "        await w.drain()\n"
        "    assert w.results[handle.id].state == 'succeeded'\n"
    ),
}
PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")


def plugin_overhead(tests: int) -> dict[str, float]:
    """Median ms from one test's start to the next one's (setup, call, teardown and pytest's
    own work) by kind, after the first test (which starts the server)."""
    order = ["first"] + [kind for _ in range(tests) for kind in KINDS]
    body = "\n\n".join(KINDS[kind].format(i=i) for i in range(tests) for kind in KINDS)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "test_overhead.py").write_text(PLUGIN_TESTS.format(tests=body))
        Path(folder, "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
        starts_file = Path(folder, "starts.json")
        result = subprocess.run(
            PYTEST,
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "STARTS": str(starts_file)},
        )
        if result.returncode != 0:
            raise RuntimeError(result.stdout + result.stderr)
        starts = json.loads(starts_file.read_text())
    gaps: dict[str, list[float]] = {"first": [], **{kind: [] for kind in KINDS}}
    for kind, begin, end in zip(order, starts, starts[1:], strict=False):
        gaps[kind].append((end - begin) * 1000)
    return {kind: statistics.median(ms) for kind, ms in gaps.items()}


def report(lines: dict[str, float], rates: dict[str, float], plugin: dict[str, float]) -> str:
    base = rates["text"]
    out = [
        f"2 cores · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| measure | value |",
        "|---|---|",
        f"| settled-task log line, text | {lines['text']:.2f} µs |",
        f"| settled-task log line, json | {lines['json']:.2f} µs |",
    ]
    out += [
        f"| drain, {name} | {rate:,.0f} tasks/s ({rate / base:.2f}x text) |"
        for name, rate in rates.items()
    ]
    out += [
        f"| plugin: a plain async test, for scale | {plugin['plain']:.1f} ms |",
        f"| plugin: test with an empty worker block + drain | {plugin['empty']:.1f} ms |",
        f"| plugin: test with one task + drain + results | {plugin['one_task']:.1f} ms |",
    ]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--tests", type=int, default=40)
    args = parser.parse_args()
    lines = {
        "text": statistics.median(line_cost(False, args.lines) for _ in range(args.runs)),
        "json": statistics.median(line_cost(True, args.lines) for _ in range(args.runs)),
    }
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store_dir=store) as server:
        rates = asyncio.run(drains(server.url, args.drain, args.runs))
    plugin = plugin_overhead(args.tests)
    text = report(lines, rates, plugin)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "observability.md").write_text(textwrap.dedent(text))
    print(text)


if __name__ == "__main__":
    main()
