"""What the peers' worker processes run, for `bench.peers`: a taskiq-nats broker and its
no-op tasks, and a PgQueuer worker.

    taskiq worker bench.peer_apps:broker --workers 1     # env: PEERS_NATS_URL, PEERS_PREFIX
    python -m bench.peer_apps pgqueuer DSN               # PgQueuer's benchmark setup

taskiq-nats: `PullBasedJetStreamBroker` (a durable pull consumer on a JetStream stream) with
its defaults (`pull_consume_batch=1`, the stream's default limits retention), no result
backend (taskiq's default, `DummyResultBackend`). Each benchmark run gets its own subject,
stream and durable (from `PEERS_PREFIX`), so runs never see each other's messages.

PgQueuer: the configuration its own `tools/benchmark.py` measures: one process on uvloop,
five `PgQueuer` instances (a QueueManager and a SchedulerManager each) with one asyncpg
connection apiece, `batch_size=10` (its default), continuous mode.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from taskiq_nats import PullBasedJetStreamBroker

PGQ_MANAGERS = 5  # tools/benchmark.py: --dequeue 5
PGQ_BATCH = 10  # tools/benchmark.py: --dequeue-batch-size 10 (also QueueManager.run's default)


def taskiq_names(prefix: str) -> dict[str, str]:
    """Subject, stream, durable and the latency reply subject of one run's broker."""
    return {
        "subject": f"{prefix}.tasks",
        "stream_name": f"TASKIQ_{prefix}",
        "durable": f"{prefix}_durable",
        "done": f"{prefix}_done",  # core NATS, outside the stream
    }


def make_broker(url: str, prefix: str) -> tuple[PullBasedJetStreamBroker, Any, Any]:
    """A taskiq-nats JetStream broker (pull-based, its defaults) for one run, with the
    benchmark's two tasks: `noop` (drains) and `ping` (latency: tells the benchmark, over
    core NATS on the broker's own connection, that its body ran)."""
    names = taskiq_names(prefix)
    done = names.pop("done")
    pulled = PullBasedJetStreamBroker(servers=url, **names)

    @pulled.task(task_name="bench_noop")
    async def noop(n: int = 0) -> None:
        return None

    @pulled.task(task_name="bench_ping")
    async def ping() -> None:
        await pulled.client.publish(done, b"")

    return pulled, noop, ping


# what `taskiq worker bench.peer_apps:broker` loads: the run's broker, named by the env
broker, noop, ping = make_broker(
    os.environ.get("PEERS_NATS_URL", "nats://127.0.0.1:4222"),
    os.environ.get("PEERS_PREFIX", "peers"),
)


async def pgqueuer_worker(dsn: str) -> None:
    """PgQueuer's benchmark worker: `PGQ_MANAGERS` managers in this process, each on its own
    asyncpg connection, running the no-op entrypoint `noop` until killed."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, PgQueuer, Queries

    managers = []
    for _ in range(PGQ_MANAGERS):
        queries = Queries(AsyncpgDriver(await asyncpg.connect(dsn=dsn)))
        pgq = PgQueuer(queries.driver, queries=queries)

        @pgq.entrypoint("noop")
        async def run_noop(job: Any) -> None:
            return None

        managers.append(pgq)
    print("ready", flush=True)
    await asyncio.gather(*(m.run(batch_size=PGQ_BATCH) for m in managers))


if __name__ == "__main__":
    import uvloop

    if sys.argv[1:2] != ["pgqueuer"] or len(sys.argv) != 3:
        raise SystemExit("usage: python -m bench.peer_apps pgqueuer DSN")
    uvloop.run(pgqueuer_worker(sys.argv[2]))
