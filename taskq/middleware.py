"""Middleware: code that wraps every task run and every enqueue (one extension mechanism,
with the worker lifecycle hooks in `taskq.hooks`).

A middleware is any object with one or both of:

    async def process(self, ctx, call_next):   # around each attempt in the worker
        return await call_next()               # the task's return value (or its exception)

    async def enqueue(self, envelope, call_next):  # around each enqueue in a producer
        await call_next(envelope)                  # returns once stored (or staged in a batch)

Middleware may observe, time, add metadata (`envelope.with_meta(...)`, `envelope.headers`)
and raise; it never settles a message: the worker judges what comes out of the chain (a
value, or an exception) with the task's retry policy. The first middleware is the outermost.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from taskq.envelope import Envelope
from taskq.errors import ConfigError

if TYPE_CHECKING:
    from taskq.context import TaskContext

Run = Callable[[], Awaitable[Any]]
Send = Callable[[Envelope], Awaitable[None]]
Process = Callable[["TaskContext", Run], Awaitable[Any]]
Enqueue = Callable[[Envelope, Send], Awaitable[None]]


class Middleware:
    """An optional base class: override `process` and/or `enqueue`."""

    async def process(self, ctx: TaskContext, call_next: Run) -> Any:
        return await call_next()

    async def enqueue(self, envelope: Envelope, call_next: Send) -> None:
        await call_next(envelope)


class Chain:
    """An app's middleware, as the two call chains the worker and producers run."""

    def __init__(self, items: Iterable[object] = ()) -> None:
        self.items: list[object] = []
        self._process: tuple[Process, ...] = ()
        self._enqueue: tuple[Enqueue, ...] = ()
        for item in items:
            self.add(item)

    def add(self, item: object) -> None:
        """Append `item` (innermost so far); ConfigError if it has neither hook."""
        process, enqueue = _hook(item, "process"), _hook(item, "enqueue")
        if process is None and enqueue is None:
            raise ConfigError(
                f"middleware {item!r} has neither `async def process(ctx, call_next)` "
                "nor `async def enqueue(envelope, call_next)`"
            )
        self.items.append(item)
        if process is not None:
            self._process += (process,)
        if enqueue is not None:
            self._enqueue += (enqueue,)

    async def process(self, ctx: TaskContext, run: Run) -> Any:
        """Run one attempt through every `process` middleware, `run` innermost."""
        hooks = self._process
        if not hooks:
            return await run()
        if len(hooks) == 1:  # the usual case (telemetry alone): no step closure per attempt
            return await hooks[0](ctx, run)

        async def step(index: int) -> Any:
            if index == len(hooks):
                return await run()
            return await hooks[index](ctx, lambda: step(index + 1))

        return await step(0)

    async def enqueue(self, envelope: Envelope, send: Send) -> None:
        """Send one envelope through every `enqueue` middleware, `send` innermost."""
        hooks = self._enqueue
        if not hooks:
            return await send(envelope)
        if len(hooks) == 1:
            return await hooks[0](envelope, send)

        async def step(index: int, current: Envelope) -> None:
            if index == len(hooks):
                return await send(current)
            return await hooks[index](current, lambda e: step(index + 1, e))

        return await step(0, envelope)


def _hook(item: object, name: str) -> Any:
    """`item.name` if the item really implements it (not the base class's pass-through)."""
    method = getattr(item, name, None)
    if method is None:
        return None
    if isinstance(item, Middleware) and getattr(type(item), name) is getattr(Middleware, name):
        return None
    if not inspect.iscoroutinefunction(method):
        raise ConfigError(f"middleware {item!r}: {name} must be an `async def`")
    return method
