"""The cost of `sync_interval: always` (fsync on every write) on an embedded server.

    python -m bench.durability [--rounds 3] [--store DIR]

For the server's default (fsync every 2 minutes) and for `always`, in alternation on fresh
servers whose store is under DIR (default: a temporary directory; put it on the disk you
care about, tmpfs makes fsync free): enqueue one-by-one, `enqueue_many`, and a worker in
this process draining a backlog. Prints the median tasks/s of each and writes
bench/results/durability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench.run import RESULTS, fresh_prefix
from taskq import App
from taskq.server import EmbeddedServer
from taskq.workers import Worker

MODES = {"default (2m)": None, "always": "always"}


async def one_by_one(url: str, n: int) -> float:
    app, noop = _app(url)
    started = time.perf_counter()
    for i in range(n):
        await noop.enqueue(i)
    rate = n / (time.perf_counter() - started)
    await app.aclose()
    return rate


async def bulk(url: str, n: int) -> float:
    app, noop = _app(url)
    started = time.perf_counter()
    await noop.enqueue_many(range(n))
    rate = n / (time.perf_counter() - started)
    await app.aclose()
    return rate


async def drain(url: str, n: int) -> float:
    """Tasks/s of one in-process worker (defaults, result records on) emptying n tasks."""
    app, noop = _app(url)
    await noop.enqueue_many(range(n))
    worker = Worker(app, concurrency=64)
    started = time.perf_counter()
    job = asyncio.create_task(worker.run())
    while worker.stats["succeeded"] < n:
        await asyncio.sleep(0.01)
    rate = n / (time.perf_counter() - started)
    worker.stop()
    await job
    await app.aclose()
    return rate


def _app(url: str) -> tuple[App, object]:
    app = App(url=url, prefix=fresh_prefix())

    @app.task
    async def noop(n: int = 0) -> None:
        return None

    return app, noop


async def measure(store: Path, sync: str | None, sizes: tuple[int, int, int]) -> list[float]:
    with (
        tempfile.TemporaryDirectory(dir=store) as here,
        EmbeddedServer(store_dir=here, sync=sync) as server,
    ):
        return [
            await one_by_one(server.url, sizes[0]),
            await bulk(server.url, sizes[1]),
            await drain(server.url, sizes[2]),
        ]


async def main(rounds: int, store: Path, sizes: tuple[int, int, int]) -> str:
    seen: dict[str, list[list[float]]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode, sync in MODES.items():
            seen[mode].append(await measure(store, sync, sizes))
    medians = {
        m: [statistics.median(col) for col in zip(*rows, strict=True)] for m, rows in seen.items()
    }
    lines = [
        f"fsync cost on an embedded nats-server, store in {store}, median of {rounds}",
        "",
        "| sync_interval | enqueue one-by-one | enqueue_many | drain (1 worker) |",
        "|---|---|---|---|",
    ]
    for mode, values in medians.items():
        lines.append(f"| {mode} | " + " | ".join(f"{v:,.0f}/s" for v in values) + " |")
    base, durable = medians["default (2m)"], medians["always"]
    ratios = " | ".join(f"{d / b:.2f}x" for d, b in zip(durable, base, strict=True))
    lines.append(f"| always / default | {ratios} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--sizes", default="1000,20000,10000", help="one-by-one,bulk,drain")
    args = parser.parse_args()
    counts = tuple(int(x) for x in args.sizes.split(","))
    report = asyncio.run(main(args.rounds, args.store, (counts[0], counts[1], counts[2])))
    print(report)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "durability.md").write_text(report)
