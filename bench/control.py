"""Control-plane costs and latencies, measured on an embedded server in one run.

    python -m bench.control

Prints: the cost of one heartbeat write; how long `cancel()` takes for a waiting task behind
100 and 10,000 others (it looks the id up in the queue); from `cancel()` to `CancelledError`
inside a running async task; pause (request to no delivery) and resume (request to the first
delivery). Writes bench/results/control.md.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench.run import RESULTS, fresh_prefix
from taskq import App
from taskq.records.heartbeats import WorkerRecord, ensure_workers
from taskq.server import EmbeddedServer
from taskq.workers import Worker


async def heartbeat_cost(url: str, beats: int = 300) -> float:
    """Milliseconds per heartbeat write (a record listing 16 running tasks)."""
    app = App(url=url, prefix=fresh_prefix())
    client = await app.client()
    await ensure_workers(client)
    record = WorkerRecord.model_validate(_record(16))
    body = record.model_dump_json().encode()
    bucket = client.names.workers_bucket
    started = time.perf_counter()
    for _ in range(beats):
        await client.connection.kv.put(bucket, record.key, body)
    took = (time.perf_counter() - started) / beats * 1000
    await app.aclose()
    return took


def _record(running: int) -> dict[str, object]:
    now = "2026-11-23T10:00:00.000Z"
    tasks = [
        {
            "id": f"01J{i:023d}",
            "task": "billing.charge",
            "queue": "default",
            "attempt": 1,
            "started_at": now,
        }
        for i in range(running)
    ]
    return {
        "id": "host:1234",
        "host": "host",
        "pid": 1234,
        "version": "0.1.0",
        "queues": ["default"],
        "concurrency": 16,
        "started_at": now,
        "heartbeat_at": now,
        "counts": {"succeeded": 1000},
        "running": tasks,
    }


async def cancel_waiting(url: str, behind: int) -> float:
    """Milliseconds for `cancel()` of the last of `behind` waiting tasks."""
    app = App(url=url, prefix=fresh_prefix())

    @app.task
    async def work(n: int) -> None: ...

    await work.enqueue_many(range(behind))
    last = await work.enqueue(-1)
    started = time.perf_counter()
    report = await last.cancel()
    took = (time.perf_counter() - started) * 1000
    assert report.outcome == "cancelled", report
    await app.aclose()
    return took


async def cancel_running(url: str, rounds: int = 10) -> float:
    """Median milliseconds from `cancel()` to CancelledError inside a running async task."""
    app = App(url=url, prefix=fresh_prefix())
    started, stopped = asyncio.Event(), asyncio.Event()
    seen: list[float] = []

    @app.task
    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(time.perf_counter())
            stopped.set()
            raise

    worker = Worker(app, concurrency=4)
    job = asyncio.create_task(worker.run())
    await worker.wait_ready()
    took = []
    for _ in range(rounds):
        started.clear()
        stopped.clear()
        handle = await forever.enqueue()
        await asyncio.wait_for(started.wait(), 10)
        asked = time.perf_counter()
        await handle.cancel()
        await asyncio.wait_for(stopped.wait(), 10)
        took.append((seen[-1] - asked) * 1000)
    worker.stop()
    await job
    await app.aclose()
    return statistics.median(took)


async def pause_resume(url: str) -> tuple[float, float]:
    """Milliseconds for a pause request; and from resume to the first delivery."""
    app = App(url=url, prefix=fresh_prefix())
    delivered = asyncio.Event()

    @app.task
    async def ping() -> None:
        delivered.set()

    worker = Worker(app, concurrency=4)
    job = asyncio.create_task(worker.run())
    await worker.wait_ready()
    asked = time.perf_counter()
    await app.pause_queue("default")
    paused = (time.perf_counter() - asked) * 1000
    await ping.enqueue()
    await asyncio.sleep(1.5)
    assert not delivered.is_set(), "delivered while paused"
    asked = time.perf_counter()
    await app.resume_queue("default")
    await asyncio.wait_for(delivered.wait(), 10)
    resumed = (time.perf_counter() - asked) * 1000
    worker.stop()
    await job
    await app.aclose()
    return paused, resumed


async def main() -> str:
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store_dir=Path(store)) as server:
        url = server.url
        beat = await heartbeat_cost(url)
        small = await cancel_waiting(url, 100)
        large = await cancel_waiting(url, 10_000)
        running = await cancel_running(url)
        paused, resumed = await pause_resume(url)
    return "\n".join(
        [
            f"control plane · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            "",
            "| measure | ms |",
            "|---|---|",
            f"| one heartbeat write (16 running tasks listed) | {beat:.2f} |",
            f"| cancel() of a task waiting behind 100 | {small:.1f} |",
            f"| cancel() of a task waiting behind 10,000 | {large:.1f} |",
            f"| cancel() to CancelledError in a running async task (median) | {running:.1f} |",
            f"| pause request (no delivery after it returns) | {paused:.1f} |",
            f"| resume to the first delivery (fetch timeout 1 s) | {resumed:.0f} |",
            "",
        ]
    )


if __name__ == "__main__":
    text = asyncio.run(main())
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "control.md").write_text(text)
