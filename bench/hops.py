"""Which of taskq's modules one task's code passes through (docs/architecture.md, "The path
of one task"): a profile hook on taskq's own files around one enqueue on a warm connection,
then around its delivery, from the fetch to the ack (the user's function is not counted).

    python -m bench.hops            # prints both lists, in the order each module first ran
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from bench.run import fresh_prefix
from taskq import App
from taskq.cli.main import run_async
from taskq.server import EmbeddedServer
from taskq.workers import Worker

ROOT = Path(__file__).resolve().parent.parent
OWN = tuple(str(ROOT / part) for part in ("taskq", "workers", "dlq"))


class Trace:
    """The repository's modules whose code ran while tracing, in first-run order."""

    def __init__(self) -> None:
        self.seen: dict[str, None] = {}

    def __call__(self, frame: types.FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(OWN):
                self.seen.setdefault(str(Path(path).relative_to(ROOT)), None)

    def __enter__(self) -> Trace:
        sys.setprofile(self)
        return self

    def __exit__(self, *_: object) -> None:
        sys.setprofile(None)


async def measure(url: str) -> tuple[list[str], list[str]]:
    # the default transport, whatever TASKQ_NATS_FAST_PATHS says (the map describes it)
    app = App(url=url, prefix=fresh_prefix(), nats_fast_paths=True)
    started, gate = asyncio.Event(), asyncio.Event()

    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    @app.task
    async def hold() -> None:  # a plain task too: it keeps the worker's one slot
        started.set()
        await gate.wait()

    worker = Worker(app, concurrency=1, sweeper=False)
    running = asyncio.create_task(worker.run())
    await worker.wait_ready()
    await (await add.enqueue(0, 0)).result(timeout=10)  # warm: connection, layouts, buckets
    await hold.enqueue()
    await asyncio.wait_for(started.wait(), 10)
    # the worker's slot is taken: no pull request waits, so nothing is delivered (and no
    # worker code runs) while the enqueue is traced
    with Trace() as enqueue:
        await add.enqueue(1, 2)
    with Trace() as delivery:  # `hold` ends; the worker fetches, runs, records and acks add
        gate.set()
        while worker.stats["succeeded"] < 3:
            await asyncio.sleep(0)
    worker.stop()
    await running
    await app.aclose()
    return list(enqueue.seen), list(delivery.seen)


def main() -> None:
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store_dir=store) as server:
        enqueue, delivery = run_async(measure(server.url))
    for name, seen in (("enqueue", enqueue), ("delivery", delivery)):
        print(f"{name}: {len(seen)} modules")
        for path in seen:
            print(f"  {path}")


if __name__ == "__main__":
    main()
