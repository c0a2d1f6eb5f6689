"""A FastAPI service that hands work to taskq workers.

Run it beside a worker (and a server, `taskq server`):

    uvicorn examples.fastapi_app.main:api --port 8000
    taskq worker examples.fastapi_app.tasks:app --outbox sqlite:///orders.db

The lifespan opens taskq's connection once, at start-up, and closes it at shutdown: every
request reuses it (an App keeps one connection per event loop, and uvicorn runs one loop).
`POST /orders` saves an order and its receipt task in one SQLAlchemy transaction (the
outbox, docs/outbox.md); the worker's `--outbox` relays the task once it commits.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import Column, Integer, MetaData, String, Table, insert
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from examples.fastapi_app import tasks
from taskq.errors import ResultTimeout, TaskFailed
from taskq.outbox.table import metadata as outbox_metadata

# the app's own database; the worker relays its outbox: --outbox with the same URL
database = create_async_engine(os.environ.get("ORDERS_DB", "sqlite+aiosqlite:///orders.db"))
orders = Table(
    "orders",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("item", String(200), nullable=False),
)


@asynccontextmanager
async def lifespan(_api: FastAPI) -> AsyncIterator[None]:
    await tasks.app.client()  # connect now: a server that is down fails the start, loudly
    async with database.begin() as connection:  # an app with migrations runs them instead
        await connection.run_sync(orders.metadata.create_all)
        await connection.run_sync(outbox_metadata.create_all)
    try:
        yield
    finally:
        await tasks.app.aclose()
        await database.dispose()


api = FastAPI(title="taskq example", lifespan=lifespan)


class Operands(BaseModel):
    a: int
    b: int


@api.post("/add")
async def add(operands: Operands, wait: float = 5.0) -> dict[str, object]:
    """Enqueue `add` and answer with its result, or 504 if it takes longer than `wait`."""
    handle = await tasks.add.enqueue(operands.a, operands.b)
    try:
        result = await handle.result(timeout=wait)
    except ResultTimeout as exc:
        raise HTTPException(504, {"id": handle.id, "state": exc.state}) from None
    return {"id": handle.id, "result": result}


class Purchase(BaseModel):
    item: str


@api.post("/orders", status_code=201)
async def order(purchase: Purchase, fail: bool = False) -> dict[str, object]:
    """Save an order and enqueue its receipt in the same transaction: both or (`fail`: the
    order fails after both were written) neither."""
    async with AsyncSession(database) as session, session.begin():  # an error rolls back
        saved = await session.execute(insert(orders).values(item=purchase.item))
        order_id = saved.inserted_primary_key[0]
        handle = await tasks.send_receipt.enqueue_in_async(session, order_id)
        if fail:
            raise HTTPException(409, {"id": handle.id, "saved": False})
    return {"order": order_id, "id": handle.id}


@api.post("/reports/{month}", status_code=202)
async def report(month: str, pause: float = 0.0) -> dict[str, str]:
    """Long work: enqueue it and answer at once; the client polls /tasks/{id}."""
    handle = await tasks.render_report.enqueue(month, pause)
    return {"id": handle.id}


@api.get("/tasks/{task_id}")
async def task_state(task_id: str, wait: float = 0.0) -> dict[str, object]:
    """A task's state, and its result once it has one (waiting up to `wait` seconds)."""
    handle = tasks.app.handle(task_id)
    try:
        return {"id": task_id, "state": "succeeded", "result": await handle.result(wait)}
    except ResultTimeout as exc:
        return {"id": task_id, "state": exc.state}
    except TaskFailed as exc:
        return {"id": task_id, "state": "dead", "error": str(exc)}
