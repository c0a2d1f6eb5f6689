"""An app under test: nothing here knows about tests."""

from __future__ import annotations

import taskq
from taskq import App, Reject, Retry

app = App()  # TASKQ_URL / TASKQ_PREFIX in production; the test server in tests

STOCK = {"apple": 3, "pear": 0}


@app.task
async def price(item: str, quantity: int) -> float:
    return {"apple": 0.5, "pear": 0.75}[item] * quantity


@app.task(max_retries=3, backoff=0.01, jitter=0)
async def reserve(item: str, quantity: int) -> str:
    if STOCK.get(item) is None:
        raise Reject(f"we do not sell {item}")
    if taskq.current().attempt == 1:
        raise Retry(delay=0.05)  # the stock service is slow to answer the first time
    return f"{quantity} {item} reserved"


@app.task
def invoice(total: float) -> str:  # a plain def: runs in the worker's thread pool
    return f"invoice for {total:.2f}"
