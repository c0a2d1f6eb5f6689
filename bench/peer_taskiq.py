"""taskiq-nats for `bench.peers`: enqueue, drain and latency on the run's nats-server.

The broker is `PullBasedJetStreamBroker` with its defaults (see bench/peer_apps.py), the
worker `taskiq worker bench.peer_apps:broker --workers 1` (one worker process; taskiq's
default is two) with every other option at its default (uvloop when installed, 100 async
tasks, ack when the result is "saved", a log line per task at INFO). taskiq has no bulk
enqueue API. Each measurement uses a fresh prefix (subject, stream, durable), and deletes
its stream at the end: with the default limits retention the stream keeps acked messages.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psutil

from bench.peer_apps import make_broker, taskiq_names
from bench.run import ROOT, fresh_prefix, steady_rate, wait_marker

WARMUP = 20  # latency round trips not counted, as bench/run.py's
FILL_WINDOW = 512  # kiq() calls in flight while filling a drain's backlog (not timed)


@asynccontextmanager
async def started(url: str) -> AsyncIterator[tuple[Any, Any, Any, str]]:
    """A fresh run's broker, started (stream and durable pull consumer created), with its
    tasks and prefix; shut down and its stream deleted on exit."""
    prefix = fresh_prefix()
    broker, noop, ping = make_broker(url, prefix)
    await broker.startup()
    try:
        yield broker, noop, ping, prefix
    finally:
        await broker.js.delete_stream(taskiq_names(prefix)["stream_name"])
        await broker.shutdown()


def worker(url: str, prefix: str) -> subprocess.Popen[str]:
    """`taskiq worker` (one worker process, defaults) on the run's broker."""
    env = {**os.environ, "PEERS_NATS_URL": url, "PEERS_PREFIX": prefix}
    cmd = [sys.executable, "-m", "taskiq", "worker", "bench.peer_apps:broker", "--workers", "1"]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def kill_tree(child: subprocess.Popen[str]) -> None:
    """Kill `child` and the worker processes it forked (taskiq's supervisor forks them)."""
    try:
        forked = psutil.Process(child.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        forked = []
    child.kill()
    child.wait()
    for proc in forked:
        try:
            proc.kill()
            proc.wait(10)
        except psutil.NoSuchProcess:
            pass


async def enqueue_one_by_one(url: str, n: int) -> float:
    """Tasks/s for `await noop.kiq(i)` in a loop (each a JetStream publish, acked)."""
    async with started(url) as (_, noop, _, _):
        await noop.kiq(-1)  # warm: connection, serializer
        start = time.perf_counter()
        for i in range(n):
            await noop.kiq(i)
        return n / (time.perf_counter() - start)


async def drain(url: str, n: int) -> float:
    """Tasks/s (the 90%→10% stretch) for one `taskiq worker` process to work off a backlog
    of `n` no-op tasks; the backlog is what its durable consumer has not yet had acked."""
    async with started(url) as (broker, noop, _, prefix):
        for first in range(0, n, FILL_WINDOW):
            await asyncio.gather(*(noop.kiq(i) for i in range(first, min(n, first + FILL_WINDOW))))
        names = taskiq_names(prefix)

        async def left() -> int:
            info = await broker.js.consumer_info(names["stream_name"], names["durable"])
            return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

        child = worker(url, prefix)
        try:
            rate, _ = await asyncio.gather(
                steady_rate(left, n), wait_marker([child], "Listening started")
            )
        finally:
            kill_tree(child)
        return rate


async def latency(url: str, n: int) -> list[float]:
    """Seconds from calling `ping.kiq()` to its body running in the `taskiq worker` process,
    `n` sequential round trips; the body reports back with a core NATS publish (one hop
    more than the in-process loops of the other columns)."""
    async with started(url) as (broker, _, ping, prefix):
        done: list[asyncio.Future[None]] = []

        async def ran(msg: Any) -> None:
            done[-1].set_result(None)

        await broker.client.subscribe(taskiq_names(prefix)["done"], cb=ran)
        child = worker(url, prefix)
        try:
            await wait_marker([child], "Listening started")
            samples: list[float] = []
            for i in range(n + WARMUP):
                done.append(asyncio.get_running_loop().create_future())
                start = time.perf_counter()
                await ping.kiq()
                await asyncio.wait_for(done[-1], 30)
                if i >= WARMUP:
                    samples.append(time.perf_counter() - start)
            return samples
        finally:
            kill_tree(child)
