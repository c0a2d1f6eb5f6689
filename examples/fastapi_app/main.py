"""A FastAPI service that hands work to taskq workers.

Run it beside a worker (and a server, `taskq server`):

    uvicorn examples.fastapi_app.main:api --port 8000
    taskq worker examples.fastapi_app.tasks:app

The lifespan opens taskq's connection once, at start-up, and closes it at shutdown: every
request reuses it (an App keeps one connection per event loop, and uvicorn runs one loop).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from examples.fastapi_app import tasks
from taskq.errors import ResultTimeout, TaskFailed


@asynccontextmanager
async def lifespan(_api: FastAPI) -> AsyncIterator[None]:
    await tasks.app.client()  # connect now: a server that is down fails the start, loudly
    try:
        yield
    finally:
        await tasks.app.aclose()


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
