"""Flow control near its limits, measured on an embedded server in one run.

    python -m bench.flow

One worker (in this process, concurrency 32) per scenario, a fresh prefix each:
- a rate-limited no-op task (`rate_limit="300/s"`, 1,500 queued): starts per second;
- a concurrency-limited task (`max_concurrency=8`, 20 ms each, 800 queued; the ceiling is
  8 / 20 ms = 400/s);
- a per-key limited task (`max_per_key=4` on one key, 20 ms each, 400 queued; ceiling
  200/s): each run after the first four waits for a wake (~0.15 s schedule latency);
- parking: 2,000 tasks of one key whose single slot is held, parked (held) per second.
The cost of an unlimited task is `bench.run`'s drain ratio, compared before and after.
Writes bench/results/flow.md.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from bench.run import RESULTS, fresh_prefix
from taskq import App
from taskq.server import EmbeddedServer
from taskq.workers import Worker


async def rate_limited(url: str, total: int = 1500, limit: int = 300) -> tuple[float, int]:
    """(starts/s over the run, most starts within any second, sliding)."""
    app = App(url=url, prefix=fresh_prefix())
    starts: list[float] = []

    @app.task(rate_limit=f"{limit}/s", store_result=False)
    async def ping(n: int) -> None:
        starts.append(time.time())

    worker = Worker(app, concurrency=32)
    job = asyncio.create_task(worker.run())
    await worker.wait_ready()
    await ping.enqueue_many(range(total))
    while len(starts) < total:
        await asyncio.sleep(0.05)
    worker.stop()
    await job
    await app.aclose()
    return total / (max(starts) - min(starts)), busiest_second(starts)


def busiest_second(starts: list[float]) -> int:
    """The most starts within any window of one second (sliding, not clock-aligned)."""
    ordered, most, first = sorted(starts), 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


async def concurrency_limited(
    url: str, total: int, per_key: bool, limit: int, seconds: float = 0.02
) -> float:
    """Runs per second of a task limited to `limit` at once (globally, or on one key)."""
    app = App(url=url, prefix=fresh_prefix())
    done: list[float] = []
    options = {"concurrency_key": "key", "max_per_key": limit} if per_key else {}

    @app.task(max_concurrency=None if per_key else limit, store_result=False, **options)
    async def work(key: str, n: int) -> None:
        await asyncio.sleep(seconds)
        done.append(time.time())

    worker = Worker(app, concurrency=32)
    job = asyncio.create_task(worker.run())
    await worker.wait_ready()
    started = time.time()
    await work.enqueue_many([["k", n] for n in range(total)])
    while len(done) < total:
        await asyncio.sleep(0.05)
    took = max(done) - started
    worker.stop()
    await job
    await app.aclose()
    return total / took


async def parking(url: str, total: int = 2000) -> float:
    """Tasks parked per second behind one busy key (one worker, concurrency 32)."""
    app = App(url=url, prefix=fresh_prefix())
    release, holding = asyncio.Event(), asyncio.Event()

    @app.task(concurrency_key="key", max_per_key=1, store_result=False)
    async def hog(key: str, n: int) -> None:
        holding.set()
        await release.wait()

    worker = Worker(app, concurrency=32)
    job = asyncio.create_task(worker.run())
    await worker.wait_ready()
    await hog.enqueue("k", -1)
    await asyncio.wait_for(holding.wait(), 10)
    await hog.enqueue_many([["k", n] for n in range(total)])
    started = time.perf_counter()
    while worker.stats["held"] < total:
        await asyncio.sleep(0.01)
    took = time.perf_counter() - started
    release.set()
    worker.stop()
    await job
    await app.aclose()
    return total / took


async def main() -> str:
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store_dir=Path(store)) as server:
        url = server.url
        rate, peak = await rate_limited(url)
        lane = await concurrency_limited(url, 800, per_key=False, limit=8)
        keyed = await concurrency_limited(url, 400, per_key=True, limit=4)
        parked = await parking(url)
    return "\n".join(
        [
            f"flow control · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
            " · 1 worker, -c 32",
            "",
            "| scenario | limit | measured |",
            "|---|---|---|",
            f"| rate_limit 300/s, 1,500 no-op tasks | 300/s | {rate:.0f}/s "
            f"(busiest sliding second {peak}) |",
            f"| max_concurrency 8, 20 ms tasks | 400/s | {lane:.0f}/s |",
            f"| max_per_key 4 (one key), 20 ms tasks | 200/s | {keyed:.0f}/s |",
            f"| parking behind one busy key | - | {parked:.0f} tasks/s |",
            "",
        ]
    )


if __name__ == "__main__":
    text = asyncio.run(main())
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "flow.md").write_text(text)
