"""Running one task attempt: through the app's middleware, with `taskq.current()` set;
async on the loop, sync in a thread, bounded by the task's `timeout`."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from taskq.context import TaskContext, enter, leave
from taskq.errors import NonFiniteFloat, TaskTimeout
from taskq.flowcontrol.start_gate import StartGate, StartSlipped
from taskq.middleware import Chain
from taskq.policy import Failure, Outcome, Success
from taskq.records.finite import finite_json
from taskq.task import Task
from taskq.workers.threads import TaskThreads

# a traceback text travelling with an exception raised far away (a Spark executor), so the
# record shows where it happened rather than where it was re-raised
REMOTE_TRACE = "__taskq_traceback__"


async def run_attempt(
    ctx: TaskContext, chain: Chain, call: Callable[[], Awaitable[Any]]
) -> Outcome:
    """Run `call` (the attempt) inside every `process` middleware, with `ctx` current;
    capture its outcome. Never raises (but cancellation)."""
    token = enter(ctx)
    try:
        value = await chain.process(ctx, call)
    except (asyncio.CancelledError, StartSlipped):  # no outcome: interrupted, or held
        raise
    except TaskTimeout as exc:
        return Failure(exc, "")
    except Exception as exc:
        return Failure(exc, getattr(exc, REMOTE_TRACE, None) or traceback.format_exc())
    finally:
        leave(token)
    return Success(value)


async def call_function(
    task: Task[Any, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    threads: Executor,
    gate: StartGate | None = None,
) -> Any:
    """The task's own function, once: on the loop (async) or in a thread (def); a
    rate-limited one's `gate` checked right before its body starts."""
    if task.is_async:
        if gate is not None:
            await gate.passed()
        return await _bounded(task, task.fn(*args, **kwargs))
    loop = asyncio.get_running_loop()
    body = task.fn if gate is None else functools.partial(_gated, gate, task.fn)
    call = functools.partial(contextvars.copy_context().run, body, *args, **kwargs)
    # A thread cannot be killed: on timeout the attempt fails and the thread is left
    # to finish on its own, no longer counted in the pool (workers/threads.py)
    future = threads.submit(call)
    try:
        return await _bounded(task, asyncio.wrap_future(future, loop=loop))
    except TaskTimeout:
        if isinstance(threads, TaskThreads):
            threads.abandon(future, task.name)
        raise


def _gated(gate: StartGate, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn` in its thread once its reserved start is known not to have slipped."""
    gate.passed_in_thread()
    return fn(*args, **kwargs)


_PLAIN = (type(None), bool, int, str)  # results that cannot hold a float: nothing to check


def refusing_non_finite(call: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    """`call` (an attempt), failing with NonFiniteFloat when its value holds a nan, inf or
    -inf: JSON has no form for one, so its record, a chain's next step or a chord's results
    would carry something else (null: None). Refused as such an argument is at enqueue:
    permanent, dead-lettered naming where it is (`result['mean']`). The process middleware
    sees the failure, as if the task had raised it."""

    async def checked() -> Any:
        value = await call()
        if type(value) not in _PLAIN:
            try:
                finite_json(value, what="result", fallback=repr)
            except NonFiniteFloat:
                raise
            except Exception:  # not JSON for another reason: the record's encoder says so
                return value
        return value

    return checked


def unwrap(outcome: Outcome) -> Any:
    """The value of an outcome, or its error raised (keeping a remote traceback)."""
    if isinstance(outcome, Success):
        return outcome.value
    if outcome.traceback:
        # an exception type with __slots__ takes no attribute: the local trace must do
        with contextlib.suppress(AttributeError):
            setattr(outcome.error, REMOTE_TRACE, outcome.traceback)
    raise outcome.error


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
