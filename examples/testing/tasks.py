"""An app under test: nothing here knows about tests."""

from __future__ import annotations

from datetime import timedelta

import taskq
from taskq import App, Reject, Retry, Workflow

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


@app.task(max_retries=2, backoff=600, backoff_max=600, jitter=0)
async def remind(user: str) -> str:
    if taskq.current().attempt == 1:
        raise RuntimeError("the mail server is down")  # retried ten minutes later
    return f"reminded {user}"


@app.workflow
async def trial(wf: Workflow, user: str) -> str:
    """A 14-day trial: wait two weeks, give the user a day to upgrade, else remind them."""
    await wf.sleep(timedelta(days=14))
    upgraded = await wf.wait_for("upgraded", timeout=timedelta(days=1))
    if upgraded is not None:
        return f"{user} upgraded"
    return await wf.run(remind, user)
