"""Quick start: three tasks, run with

taskq server                                   # shell 1: embedded nats-server
taskq worker examples.quickstart:app           # shell 2: a worker
taskq enqueue examples.quickstart:app add '[1, 2]'
python -m examples.quickstart                  # or enqueue from Python
"""

from __future__ import annotations

import asyncio
import random

from taskq import App, Reject

app = App()  # TASKQ_URL or nats://127.0.0.1:4222, prefix "taskq"


@app.task
async def add(a: int, b: int) -> int:
    """An async task runs on the worker's event loop."""
    return a + b


@app.task(max_retries=5, backoff=0.5)
def fetch_rate(currency: str) -> float:
    """A plain `def` task runs in the worker's thread pool; failures retry with backoff."""
    if random.random() < 0.5:
        raise ConnectionError("rate service unavailable")
    return 1.1 if currency == "EUR" else 1.0


@app.task(max_retries=0)
async def charge(order_id: str, amount: float) -> str:
    """`Reject` sends a task straight to the dead-letter queue, no retries."""
    if amount <= 0:
        raise Reject(f"order {order_id}: amount must be positive")
    return f"charged {amount:.2f} for {order_id}"


async def main() -> None:
    handle = await add.enqueue(1, 2)
    print("enqueued add:", handle.id)
    await fetch_rate.enqueue("EUR")
    await charge.options(key="order-42").enqueue("order-42", 9.99)  # idempotent
    await charge.enqueue("order-43", -1)  # ends in the DLQ
    await app.aclose()


if __name__ == "__main__":
    asyncio.run(main())
