"""The transactional outbox, measured: committed rows relayed per second on
Postgres, and the latency from a commit to its task starting (p50/p99), beside PgQueuer's
enqueue-to-start on the same Postgres in the same run (its enqueue is its own transaction:
the in-transaction enqueue PgQueuer sells).

    python -m bench.outbox [--rows 20000] [--latency 300] [--batch 1000]

One nats-server (temporary store, default sync) and one Postgres (initdb's defaults:
`synchronous_commit=on`, `fsync=on`) on this machine; the relay and a worker run in this
process, as bench/run.py runs taskq's worker. Targets: >= 5,000 rows/s relayed, p50
commit-to-start <= 20 ms. Writes bench/results/outbox.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bench import peer_pgqueuer
from bench.run import percentile
from taskq import App
from taskq.outbox.database import create_table, engine
from taskq.outbox.relay import Relay
from taskq.outbox.table import outbox
from taskq.server import EmbeddedServer
from taskq.workers import Worker
from tests.postgres import PgServer

WRITE_CHUNK = 500  # rows per transaction while filling the table (not timed)
WARMUP = 20


def fresh_app(url: str) -> tuple[App, Any, list[asyncio.Future[None]]]:
    """An app with a no-op task whose body resolves the latest future of `done`."""
    app = App(url=url, prefix=f"ob{uuid.uuid4().hex[:8]}")
    done: list[asyncio.Future[None]] = []

    @app.task
    async def noop(i: int) -> None:
        if done and not done[-1].done():
            done[-1].set_result(None)

    return app, noop, done


async def fill(database: AsyncEngine, task: Any, rows: int) -> None:
    for start in range(0, rows, WRITE_CHUNK):
        async with database.begin() as connection:
            for i in range(start, min(rows, start + WRITE_CHUNK)):
                await task.enqueue_in_async(connection, i)


async def waiting(database: AsyncEngine, prefix: str) -> int:
    async with database.connect() as connection:
        query = select(func.count()).select_from(outbox).where(outbox.c.prefix == prefix)
        return int((await connection.execute(query)).scalar_one())


async def relay_rate(nats_url: str, dsn: str, rows: int, batch: int) -> float:
    """Rows per second from a relay's start to an empty table (rows committed before)."""
    app, noop, _ = fresh_app(nats_url)
    database = engine(dsn)
    await fill(database, noop, rows)
    relay = Relay(app, dsn, batch=batch)
    began = time.perf_counter()
    job = asyncio.create_task(relay.run())
    while relay.stats["published"] < rows:
        await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - began
    relay.stop()
    await job
    assert await waiting(database, app.settings.prefix) == 0
    await database.dispose()
    await app.aclose()
    return rows / elapsed


async def commit_to_start(nats_url: str, dsn: str, n: int) -> list[float]:
    """Seconds from a transaction's commit (its enqueue_in inside) to the task's body."""
    app, noop, done = fresh_app(nats_url)
    database = engine(dsn)
    worker, relay = Worker(app, concurrency=16), Relay(app, dsn)
    jobs = [asyncio.create_task(worker.run()), asyncio.create_task(relay.run())]
    await worker.wait_ready()
    await relay.ready.wait()
    samples = []
    for i in range(n + WARMUP):
        done.append(asyncio.get_running_loop().create_future())
        async with database.begin() as connection:
            await noop.enqueue_in_async(connection, i)
        start = time.perf_counter()  # the commit returned
        await asyncio.wait_for(done[-1], 30)
        if i >= WARMUP:
            samples.append(time.perf_counter() - start)
    worker.stop()
    relay.stop()
    await asyncio.gather(*jobs)
    await database.dispose()
    await app.aclose()
    return samples


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    with EmbeddedServer() as nats_server, PgServer() as pg:
        await create_table(pg.dsn)
        await peer_pgqueuer.install(pg.dsn)
        rate = await relay_rate(nats_server.url, pg.dsn, args.rows, args.batch)
        ours = await commit_to_start(nats_server.url, pg.dsn, args.latency)
        theirs = await peer_pgqueuer.latency(pg.dsn, args.latency)
        return {
            "rows_relayed_per_s": round(rate),
            "commit_to_start_ms": _ms(ours),
            "pgqueuer_enqueue_to_start_ms": _ms(theirs),
            "p50_ratio_to_pgqueuer": round(percentile(ours, 0.5) / percentile(theirs, 0.5), 2),
            "postgres": pg.version(),
            "rows": args.rows,
            "batch": args.batch,
            "round_trips": args.latency,
        }


def _ms(samples: list[float]) -> dict[str, float]:
    return {f"p{int(q * 100)}": round(percentile(samples, q) * 1000, 2) for q in (0.5, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--latency", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1000)
    result = asyncio.run(measure(parser.parse_args()))
    print(json.dumps(result, indent=2))
    out = Path(__file__).parent / "results" / "outbox.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    targets = result["rows_relayed_per_s"] >= 5000 and result["commit_to_start_ms"]["p50"] <= 20
    print(f"targets (>= 5000 rows/s, p50 <= 20 ms): {'met' if targets else 'NOT met'}")


if __name__ == "__main__":
    main()
