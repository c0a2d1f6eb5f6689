"""Running one task attempt: async on the loop, sync in a thread, bounded by `timeout`."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import traceback
from concurrent.futures import Executor
from typing import Any

from taskq.errors import TaskTimeout
from taskq.policy import Failure, Outcome, Success
from taskq.task import Task


async def run_attempt(
    task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], threads: Executor
) -> Outcome:
    """Run the task's function once and capture its outcome; never raises (but cancellation)."""
    try:
        if task.is_async:
            value = await _bounded(task, task.fn(*args, **kwargs))
        else:
            loop = asyncio.get_running_loop()
            call = functools.partial(contextvars.copy_context().run, task.fn, *args, **kwargs)
            # A thread cannot be killed: on timeout the attempt fails and the thread is left
            # to finish on its own (documented in docs/concepts.md).
            value = await _bounded(task, loop.run_in_executor(threads, call))
    except asyncio.CancelledError:
        raise
    except TaskTimeout as exc:
        return Failure(exc, "")
    except Exception as exc:
        return Failure(exc, traceback.format_exc())
    return Success(value)


async def _bounded(task: Task[Any, Any], awaitable: Any) -> Any:
    if task.timeout is None:
        return await awaitable
    try:
        async with asyncio.timeout(task.timeout) as scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise TaskTimeout(task.name, task.timeout) from None
        raise
