"""Tasks for the metrics and JSON-log tests: a success, a retry, a dead letter and a task
long enough to have its lease extended (ack_wait 1 s, so a beat every ~0.33 s)."""

from __future__ import annotations

import asyncio

import taskq
from taskq import App, Reject

app = App()


@app.task
async def ok(n: int) -> int:
    return n


@app.task(max_retries=2, backoff=0.05, jitter=0)
async def flaky() -> str:
    if taskq.current().attempt == 1:
        raise RuntimeError("first attempt fails")
    return "second time lucky"


@app.task
async def doomed() -> None:
    raise Reject("never works")


@app.task(ack_wait=1.0)
async def long() -> None:
    await asyncio.sleep(1.2)
