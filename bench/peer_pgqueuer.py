"""PgQueuer for `bench.peers`: a throwaway Postgres, and the four measurements on it.

Postgres runs with its defaults (`initdb`'s configuration: `synchronous_commit=on`,
`fsync=on`, so every commit is flushed to disk before it returns; shared_buffers 128MB),
on a free loopback port with its unix socket in its own temporary directory; clients
connect over TCP to 127.0.0.1, as the NATS clients do. The schema is PgQueuer's own
(`Queries.install()`, what `pgq install` runs) with its default durability (`durable`:
every table logged), without `pgq autovac` (a tuning step, not a default).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer, Queries

from bench.peer_apps import PGQ_BATCH, PGQ_MANAGERS
from bench.run import spawn, steady_rate, wait_marker

WARMUP = 20  # latency round trips not counted, as bench/run.py's


async def settings(dsn: str) -> dict[str, str]:
    """The Postgres settings the durable comparison rests on, as the server reports them."""
    conn = await asyncpg.connect(dsn)
    try:
        names = ("synchronous_commit", "fsync", "wal_sync_method", "shared_buffers")
        return {n: await conn.fetchval(f"SHOW {n}") for n in names}
    finally:
        await conn.close()


async def install(dsn: str) -> None:
    """PgQueuer's schema (tables, indexes, the NOTIFY trigger), as `pgq install` makes it."""
    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(conn))
        if not await queries.has_table("pgqueuer"):
            await queries.install()
    finally:
        await conn.close()


async def fresh_queries(dsn: str) -> tuple[Any, Queries]:
    """A connection and PgQueuer's queries on it, the queue and its log tables emptied
    (TRUNCATE): each measurement starts from an empty queue."""
    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    await queries.clear_queue()
    await queries.clear_queue_log()
    await queries.clear_statistics_log()
    return conn, queries


# -- the four measurements --------------------------------------------------------------------
async def enqueue_one_by_one(dsn: str, n: int) -> float:
    """Tasks/s for `await queries.enqueue("noop", payload)` in a loop: one INSERT (and one
    commit, so one WAL flush) each."""
    conn, queries = await fresh_queries(dsn)
    await queries.enqueue("noop", b"warm")
    start = time.perf_counter()
    for i in range(n):
        await queries.enqueue("noop", str(i).encode())
    took = time.perf_counter() - start
    await conn.close()
    return n / took


async def enqueue_bulk(dsn: str, n: int) -> float:
    """Tasks/s for one `queries.enqueue([...] * n, ...)` call: its batch API, all `n` in one
    statement, as its own drain benchmark fills the queue."""
    conn, queries = await fresh_queries(dsn)
    await queries.enqueue("noop", b"warm")
    start = time.perf_counter()
    await queries.enqueue(["noop"] * n, [str(i).encode() for i in range(n)], [0] * n)
    took = time.perf_counter() - start
    await conn.close()
    return n / took


async def drain(dsn: str, n: int) -> float:
    """Tasks/s (the 90%→10% stretch) for one worker process, PgQueuer's benchmark setup
    (`bench.peer_apps pgqueuer`), to empty a backlog of `n` no-op jobs."""
    conn, queries = await fresh_queries(dsn)
    await queries.enqueue(["noop"] * n, [str(i).encode() for i in range(n)], [0] * n)
    child = spawn([sys.executable, "-m", "bench.peer_apps", "pgqueuer", dsn])
    try:
        rate, _ = await asyncio.gather(
            steady_rate(lambda: conn.fetchval("SELECT count(*) FROM pgqueuer"), n),
            wait_marker([child], "ready"),
        )
    finally:
        child.kill()
        child.wait()
        await conn.close()
    return rate


async def latency(dsn: str, n: int) -> list[float]:
    """Seconds from calling `enqueue` to the job's body running, `n` sequential round trips,
    with PgQueuer's benchmark worker setup (five managers, batch 10, one asyncpg connection
    each) running in this process (as bench/run.py runs taskq's and the raw loop's)."""
    conn, queries = await fresh_queries(dsn)
    done: list[asyncio.Future[None]] = []
    own = [await asyncpg.connect(dsn) for _ in range(PGQ_MANAGERS)]
    managers = [manager(c, done) for c in own]
    running = [asyncio.create_task(m.run(batch_size=PGQ_BATCH)) for m in managers]
    try:
        return await round_trips(queries, done, n)
    finally:
        for m in managers:
            m.shutdown.set()
        await asyncio.wait(running, timeout=10)
        for c in [*own, conn]:
            await c.close()


def manager(conn: Any, done: list[asyncio.Future[None]]) -> PgQueuer:
    """One PgQueuer (QueueManager + SchedulerManager) on `conn` whose `noop` body resolves
    the latest future in `done`."""
    queries = Queries(AsyncpgDriver(conn))
    pgq = PgQueuer(queries.driver, queries=queries)

    @pgq.entrypoint("noop")
    async def body(job: Any) -> None:
        done[-1].set_result(None)

    return pgq


async def round_trips(queries: Queries, done: list[asyncio.Future[None]], n: int) -> list[float]:
    """`n` (+ warm-up) sequential enqueue → body-ran round trips, in seconds."""
    samples: list[float] = []
    for i in range(n + WARMUP):
        done.append(asyncio.get_running_loop().create_future())
        start = time.perf_counter()
        await queries.enqueue("noop", b"ping")
        await asyncio.wait_for(done[-1], 30)
        if i >= WARMUP:
            samples.append(time.perf_counter() - start)
    return samples
