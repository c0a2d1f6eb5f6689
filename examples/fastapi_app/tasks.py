"""The service's tasks. Workers run them with `taskq worker examples.fastapi_app.tasks:app`;
the API only enqueues them (and waits for a result when a request wants one)."""

from __future__ import annotations

import asyncio

from taskq import App

app = App()  # TASKQ_URL / TASKQ_PREFIX, in the API and the workers alike


@app.task
async def add(a: int, b: int) -> int:
    return a + b


@app.task(timeout=120)
async def render_report(month: str, pause: float = 0.0) -> str:
    await asyncio.sleep(pause)  # stands in for minutes of real work
    return f"report for {month}"


@app.task
async def send_receipt(order_id: int) -> int:
    """Stands in for e-mailing a receipt; enqueued with its order, in its transaction."""
    return order_id
