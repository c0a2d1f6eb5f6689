"""A module-level app as users write one, for tests/test_testing.py: nothing in it knows
about tests (taskq.testing points it at the test's server and prefix)."""

from __future__ import annotations

import asyncio

import taskq
from taskq import App, Reject

app = App()


@app.task
async def add(a: int, b: int) -> int:
    return a + b


@app.task
def mul(a: int, b: int) -> int:  # a plain def: runs in the worker's threads
    return a * b


@app.task(max_retries=2, backoff=0.05, jitter=0)
async def flaky() -> int:
    if taskq.current().attempt < 2:
        raise ConnectionError("try again")
    return taskq.current().attempt


@app.task
async def refund(order: str) -> None:
    raise Reject(f"order {order} was never paid")


@app.task
async def nap(seconds: float) -> None:
    await asyncio.sleep(seconds)
