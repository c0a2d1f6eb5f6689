"""The soak: 1,000,000 no-op tasks through 2 worker processes, with 20 random
worker SIGKILLs and 2 server SIGKILL-and-restarts on the way; nothing lost.

Marked slow and soak (the default run deselects it). Run it with
`pytest -m soak -n 0 -s tests/reliability/test_soak.py`; TASKQ_SOAK_TASKS sets the size.
It prints the accounting (lost, duplicates), each worker process's resident memory at the
start and end of its life, and the server's stored bytes after the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from taskq import App
from taskq.ports import lease_port
from taskq.records.heartbeats import list_workers
from taskq.server import EmbeddedServer
from tests.apps import reliable
from tests.conftest import ROOT, cli_argv, wait_until
from tests.reliability.ledger import account, runs

SPEC = "tests.apps.reliable:app"
TASKS = int(os.environ.get("TASKQ_SOAK_TASKS", "1000000"))
WORKER_KILLS = 20
SERVER_RESTARTS = 2
CHUNK = 10_000  # tasks per enqueue_many call
WARM_UP = 10.0  # seconds of a worker's life before its memory is sampled
RESULTS_TTL = 30.0  # result records expire soon after the drain: the store empties


@dataclass
class Life:
    """One worker process from start to kill (or the end): its resident memory, sampled."""

    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    rss: list[float] = field(default_factory=list)

    def sample(self) -> None:
        if time.monotonic() - self.started < WARM_UP:
            return  # still importing and connecting: not yet its working size
        with contextlib.suppress(psutil.Error):
            self.rss.append(psutil.Process(self.proc.pid).memory_info().rss / 2**20)


class Fleet:
    """Two `taskq worker` processes (quiet: a million INFO lines would be the bottleneck)."""

    def __init__(self, url: str, prefix: str, ledger: Path, log: Path) -> None:
        self.argv = cli_argv(url, prefix, "worker", SPEC, "-c", "32")
        self.ledger = ledger
        self.env = {
            **os.environ,
            "TASKQ_TEST_LEDGER": str(ledger),
            "TASKQ_TEST_RESULTS_TTL": str(RESULTS_TTL),
        }
        self.log = open(log, "ab")  # noqa: SIM115
        self.lives: list[Life] = []
        self.live: list[Life] = [self._start(), self._start()]

    def _start(self) -> Life:
        proc = subprocess.Popen(
            self.argv, cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT
        )
        life = Life(proc)
        self.lives.append(life)
        return life

    def kill_one(self, rng: random.Random) -> None:
        i = rng.randrange(len(self.live))
        victim = self.live[i]
        victim.sample()
        victim.proc.kill()  # SIGKILL, mid-batch
        victim.proc.wait(10)
        self.live[i] = self._start()

    def sample(self) -> None:
        """Sample each worker's memory; start again one that exited by itself (a worker
        started while the server restarts exits: "cannot reach NATS")."""
        for i, life in enumerate(self.live):
            if life.proc.poll() is not None:
                self.live[i] = self._start()
            else:
                life.sample()

    def close(self) -> None:
        for life in self.live:
            if life.proc.poll() is None:
                life.proc.kill()
                life.proc.wait(10)
        self.log.close()


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.timeout(3600)
async def test_a_million_tasks_through_kills_and_restarts(tmp_path: Path) -> None:
    port = lease_port()
    store = tmp_path / "store"
    server = EmbeddedServer(port=port, store_dir=store).start()
    prefix = f"soak{port}"
    ledger = tmp_path / "ledger.txt"
    reliable.app.configure(url=server.url, prefix=prefix, results_ttl=RESULTS_TTL)
    app = reliable.app
    fleet = Fleet(server.url, prefix, ledger, tmp_path / "workers.log")
    started = time.monotonic()
    try:
        await wait_until(lambda: _listed(app, 2), timeout=60)
        ids = [f"k{i:07d}" for i in range(TASKS)]
        faults = asyncio.create_task(_faults(fleet, server, port, store, ledger))
        sampling = asyncio.create_task(_sample(fleet))
        await _enqueue(ids)
        enqueued = time.monotonic() - started
        server = await faults
        await wait_until(lambda: _count(ledger) >= TASKS, timeout=TASKS / 500, every=2.0)
        await wait_until(lambda: _all_done(ledger, ids), timeout=120, every=2.0)
        drained = time.monotonic() - started
        sampling.cancel()
        fleet.sample()
        result = await account(app, ids, ledger)
        stored = await _stored(app)
        assert result.lost == 0 and result.succeeded == TASKS, result
        assert stored["queue"] == 0, stored
        await wait_until(lambda: _emptied(app), timeout=RESULTS_TTL + 120, every=2.0)
        emptied = await _stored(app)
        _report(result.line("soak", WORKER_KILLS), fleet, enqueued, drained, stored, emptied)
    finally:
        fleet.close()
        await app.aclose()
        server.stop()


async def _enqueue(ids: list[str]) -> None:
    """Every id, in chunks; a chunk that straddles a server restart is sent again (its
    `Nats-Msg-Id`s deduplicate whatever the server had already stored)."""
    for at in range(0, len(ids), CHUNK):
        items = [{"tid": tid} for tid in ids[at : at + CHUNK]]
        for _attempt in range(30):
            try:
                await reliable.awork.enqueue_many(items)
                break
            except Exception:  # the server is down for a moment: send the chunk again
                await asyncio.sleep(1.0)
        else:
            raise AssertionError(f"chunk at {at} never enqueued")


async def _faults(
    fleet: Fleet, server: EmbeddedServer, port: int, store: Path, ledger: Path
) -> EmbeddedServer:
    """20 worker kills spread over the run, and a server restart after the 7th and 14th."""
    rng = random.Random(19)
    for n in range(1, WORKER_KILLS + 1):
        target = TASKS * n // (WORKER_KILLS + 2)
        await wait_until(lambda t=target: _count(ledger) >= t, timeout=600, every=0.5)
        fleet.sample()
        fleet.kill_one(rng)
        if n % 7 == 0 and n // 7 <= SERVER_RESTARTS:
            server.kill()
            await asyncio.sleep(1.0)
            server = EmbeddedServer(port=port, store_dir=store).start()
    return server


async def _sample(fleet: Fleet) -> None:
    """Every worker's resident memory every 2 s (each life's first and last are reported)."""
    while True:
        fleet.sample()
        await asyncio.sleep(2.0)


def _ran_by(ledger: Path, pid: int) -> int:
    """Tasks the worker process `pid` ran (the ledger names the pid on each line)."""
    mark = f" {pid}\n".encode()
    with open(ledger, "rb") as f:
        return sum(1 for line in f if line.endswith(mark))


def _count(ledger: Path) -> int:
    """Lines in the ledger (runs so far, duplicates included), read cheaply."""
    try:
        with open(ledger, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def _all_done(ledger: Path, ids: list[str]) -> bool:
    done = runs(ledger)
    return all(done[i] > 0 for i in ids)


async def _listed(app: App, n: int) -> bool:
    return len(await list_workers(app)) >= n


async def _stored(app: App) -> dict[str, int]:
    """Stored bytes after the drain: the queue stream, and everything under the prefix."""
    broker = (await app.client()).connection
    queue = await broker.streams.state(app.names.queue_stream("default"))
    total = 0
    for name in await broker.streams.listing():  # queue, DLQ, and the KV buckets' streams
        if app.settings.prefix.upper() in name:
            total += (await broker.streams.state(name)).bytes
    return {"queue": queue.messages, "queue_bytes": queue.bytes, "all_bytes": total}


async def _emptied(app: App) -> bool:
    """Whether the server holds under 1 MiB for this app (expired results included)."""
    return (await _stored(app))["all_bytes"] < 2**20


def _report(
    line: str,
    fleet: Fleet,
    enqueued: float,
    drained: float,
    stored: dict[str, int],
    emptied: dict[str, int],
) -> None:
    lives = [life for life in fleet.lives if len(life.rss) >= 2]
    longest = max(lives, key=lambda life: len(life.rss), default=None)
    print(f"\n{line}; server restarts={SERVER_RESTARTS}")
    print(f"enqueued in {enqueued:.0f} s, all run by {drained:.0f} s ({TASKS / drained:.0f}/s)")
    if longest is not None:
        ran = _ran_by(fleet.ledger, longest.proc.pid)
        print(
            f"worker RSS over its longest life ({len(longest.rss)} samples, {ran} tasks run): "
            f"start {longest.rss[0]:.1f} MiB, end {longest.rss[-1]:.1f} MiB, "
            f"max {max(longest.rss):.1f}; max over all lives "
            f"{max(max(life.rss) for life in lives):.1f} MiB"
        )
    print(f"after the drain: {stored}; once results expired ({RESULTS_TTL:.0f} s): {emptied}")
