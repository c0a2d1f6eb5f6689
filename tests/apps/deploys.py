"""The rolling-deploy test's app (tests/reliability/test_faults.py): the reliability suite's
ledger task on a lease as long as production's. A graceful deploy needs no redelivery; the
suite's 1 s lease (`reliable.awork`, for fast redelivery after kills) lapses when a loaded
machine stalls a worker's event loop past it, and the task then runs twice (seen once in a
full suite run), which is no fault of the deploy."""

from __future__ import annotations

import asyncio

from taskq import App
from tests.apps.reliable import record

app = App()


@app.task(ack_wait=10.0, max_retries=20, backoff=0.1, jitter=0.1)
async def work(tid: str, seconds: float = 0.0) -> None:
    if seconds:
        await asyncio.sleep(seconds)
    record(tid)
