"""Middleware: code that wraps every task run and every enqueue (one extension mechanism,
with the worker lifecycle hooks in `taskq.hooks`).

A middleware is any object with one or more of:

    async def process(self, ctx, call_next):   # around each attempt in the worker
        return await call_next()               # the task's return value (or its exception)

    async def enqueue(self, envelope, call_next):  # around each enqueue in a producer
        await call_next(envelope)                  # returns once stored (or staged in a batch)

    async def after_settle(self, settled):     # once a verdict's records are stored and
        ...                                    # its message acked, retried or dead-lettered

and, optionally, `task_options`: the names of `@app.task(...)` options it accepts (read
back as `ctx.middleware_options` and `settled.middleware_options`); any other unknown option
is a ConfigError at declaration, so add such middleware before declaring the tasks.

Middleware may observe, time, add metadata (`envelope.with_meta(...)`, `envelope.headers`)
and raise; it never settles a message: the worker judges what comes out of the chain (a
value, or an exception) with the task's retry policy, and `after_settle` sees the verdict
only once it is final (an error there is logged; the message stays settled). The first
middleware is the outermost.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from taskq.errors import ConfigError
from taskq.records.envelope import Envelope

if TYPE_CHECKING:
    from taskq.context import TaskContext
    from taskq.policy import Decision, Outcome

log = logging.getLogger("taskq.worker")

Run = Callable[[], Awaitable[Any]]
Send = Callable[[Envelope], Awaitable[None]]
Process = Callable[["TaskContext", Run], Awaitable[Any]]
Enqueue = Callable[[Envelope, Send], Awaitable[None]]
AfterSettle = Callable[["Settled"], Awaitable[None]]


@dataclass(frozen=True)
class Settled:
    """One delivery's verdict, final: its records stored and its message acked (`Ack`,
    `Cancel`), handed back for a retry (`Nak`) or dead-lettered (`Dead`)."""

    task_id: str  # "" when its body could not be read
    task: str  # the task's name ("" when unknown)
    queue: str
    attempt: int
    verdict: Decision
    outcome: Outcome | None  # the attempt's value or error; None when it did not run
    context: TaskContext | None  # the attempt's context; None when it did not run
    middleware_options: Mapping[str, Any] = field(default_factory=dict)


class Middleware:
    """An optional base class: override `process`, `enqueue` and/or `after_settle`, and
    name the task options it accepts in `task_options`."""

    task_options: ClassVar[frozenset[str]] = frozenset()

    async def process(self, ctx: TaskContext, call_next: Run) -> Any:
        return await call_next()

    async def enqueue(self, envelope: Envelope, call_next: Send) -> None:
        await call_next(envelope)

    async def after_settle(self, settled: Settled) -> None:
        return None


class Chain:
    """An app's middleware, as the two call chains the worker and producers run."""

    def __init__(self, items: Iterable[object] = (), reserved: Iterable[str] = ()) -> None:
        self.items: list[object] = []
        self._reserved = frozenset(reserved)  # `@app.task`'s own options
        self._process: tuple[Process, ...] = ()
        self._enqueue: tuple[Enqueue, ...] = ()
        self._after: tuple[AfterSettle, ...] = ()
        self.task_options: frozenset[str] = frozenset()
        # whether any middleware has `after_settle` (else no Settled is built at all)
        self.settles_observed = False
        # what runs one attempt: `_through_all`, or the one `process` hook itself (the
        # usual case, telemetry alone), so a plain attempt makes no call into the chain
        self.process: Process = self._through_all
        for item in items:
            self.add(item)

    def add(self, item: object) -> None:
        """Append `item` (innermost so far); ConfigError if it has no hook, or declares a
        task option taskq has (or another middleware declared)."""
        process, enqueue = _hook(item, "process"), _hook(item, "enqueue")
        after = _hook(item, "after_settle")
        if process is None and enqueue is None and after is None:
            raise ConfigError(
                f"middleware {item!r} has none of `async def process(ctx, call_next)`, "
                "`async def enqueue(envelope, call_next)`, `async def after_settle(settled)`"
            )
        options = _declared_options(item)
        taken = options & (self.task_options | self._reserved)
        if taken:
            raise ConfigError(f"middleware {item!r}: task option(s) {sorted(taken)} are taken")
        self.items.append(item)
        self.task_options |= options
        if process is not None:
            self._process += (process,)
            self.process = process if len(self._process) == 1 else self._through_all
        if enqueue is not None:
            self._enqueue += (enqueue,)
        if after is not None:
            self._after += (after,)
            self.settles_observed = True

    async def after_settle(self, settled: Settled) -> None:
        """Tell every `after_settle` middleware, in order; an error is logged, not raised:
        the message is settled already."""
        for hook in self._after:
            try:
                await hook(settled)
            except Exception:
                log.exception("after_settle middleware %r failed on %s", hook, settled.task_id)

    async def _through_all(self, ctx: TaskContext, run: Run) -> Any:
        """Run one attempt through every `process` middleware, `run` innermost."""
        hooks = self._process
        if not hooks:
            return await run()

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


def _declared_options(item: object) -> frozenset[str]:
    declared = getattr(item, "task_options", ())
    if isinstance(declared, str) or not all(isinstance(n, str) for n in declared):
        raise ConfigError(f"middleware {item!r}: task_options must be a set of names")
    return frozenset(declared)


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
