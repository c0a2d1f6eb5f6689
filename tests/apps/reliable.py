"""Tasks for the reliability suite: every run writes its task id to a ledger file.

The ledger is append-only (one short `write` per line on an O_APPEND file, atomic on Linux),
so concurrent worker processes can share it; a task id appearing twice is a duplicate run.
"""

from __future__ import annotations

import asyncio
import os
import time

from taskq import App

# the soak lets its result records expire soon after its drain (tests/reliability/test_soak.py)
app = App(results_ttl=float(os.environ.get("TASKQ_TEST_RESULTS_TTL", "86400")))


def record(tid: str) -> None:
    with open(os.environ["TASKQ_TEST_LEDGER"], "a") as ledger:
        ledger.write(f"{tid} {os.getpid()}\n")


@app.task(ack_wait=1.0, max_retries=20, backoff=0.1, backoff_max=0.5, jitter=0.1)
def work(tid: str, seconds: float = 0.0) -> None:
    """A sync task of some duration."""
    if seconds:
        time.sleep(seconds)
    record(tid)


@app.task(ack_wait=1.0, max_retries=20, backoff=0.1, backoff_max=0.5, jitter=0.1)
async def awork(tid: str, seconds: float = 0.0) -> None:
    """An async task of some duration."""
    if seconds:
        await asyncio.sleep(seconds)
    record(tid)


@app.task(ack_wait=1.0, max_retries=20, backoff=0.1, backoff_max=0.5, jitter=0.1)
async def echo(tid: str) -> str:
    """Records its run and returns a value (whose record the settle-kill test checks)."""
    record(tid)
    return tid.upper()
