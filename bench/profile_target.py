"""The worker `bench/profile.py` samples: enqueues N no-op tasks, writes its `ready` file,
drains them with one in-process Worker, prints `<tasks/s> <CPU µs per task>` of the drain.

    python -m bench.profile_target N READY_FILE [--no-store-result]
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

from bench.run import fresh_prefix
from taskq import App
from taskq.cli.main import run_async
from taskq.server import EmbeddedServer
from taskq.workers import Worker
from taskq.workers.logs import install


async def drain(url: str, tasks: int, ready: Path, store_result: bool) -> tuple[float, float]:
    app = App(url=url, prefix=fresh_prefix())

    @app.task(store_result=store_result)
    async def noop(n: int = 0) -> None:
        return None

    await noop.enqueue_many(range(tasks))
    worker = Worker(app, concurrency=16, sweeper=False)
    ready.write_text("ready")
    await asyncio.sleep(0.5)  # the sampler attaches
    began, cpu = time.perf_counter(), time.process_time()
    running = asyncio.create_task(worker.run())
    while worker.stats["succeeded"] < tasks:
        await asyncio.sleep(0.01)
    took, used = time.perf_counter() - began, time.process_time() - cpu
    worker.stop()
    await running
    await app.aclose()
    return tasks / took, used * 1e6 / tasks


def main() -> None:
    tasks, ready = int(sys.argv[1]), Path(sys.argv[2])
    store_result = "--no-store-result" not in sys.argv
    with tempfile.TemporaryDirectory() as store:
        log = Path(store) / "worker.log"
        with open(log, "w") as sink:  # the settled-task lines, as a worker writes them
            sys.stderr = sink
            install(logging.INFO)
            with EmbeddedServer(store_dir=Path(store) / "js") as server:
                rate, cpu = run_async(drain(server.url, tasks, ready, store_result))
    print(f"{rate:.1f} {cpu:.2f}")


if __name__ == "__main__":
    main()
