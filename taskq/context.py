"""The task context: `taskq.current()` inside a running task says which task, which attempt,
until when, and gives a logger bound to the task's id.

The worker sets it for each attempt in a context variable, so it follows the attempt into
`def` tasks' threads and Spark job tasks' driver threads (copied contexts) and never leaks
between concurrent tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from datetime import UTC, datetime, timedelta
from typing import Any

from taskq.clock import Clock
from taskq.errors import NoTaskContext
from taskq.policy import RetryPolicy
from taskq.records.clock import parse_time
from taskq.records.envelope import Envelope
from taskq.records.progress import checked

_CURRENT: ContextVar[TaskContext | None] = ContextVar("taskq_current", default=None)
# where `progress()` goes: the worker's writer (or, in a pool process, the pipe to it)
Reporter = Callable[["TaskContext", float | dict[str, Any], str | None], None]
_LOG = logging.getLogger("taskq.task")


class TaskContext:
    """One attempt of one task, as the running code sees it."""

    __slots__ = (
        "_logger",
        "attempt",
        "cancelled",
        "clock",
        "envelope",
        "middleware_options",
        "policy",
        "queue",
        "reporter",
        "started",
        "timeout",
    )

    def __init__(
        self,
        envelope: Envelope,
        queue: str,
        attempt: int,
        policy: RetryPolicy,
        timeout: float | None,
        started: float,
        middleware_options: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.envelope = envelope
        self.clock = clock or Clock()  # the worker's app's: skipped time included
        self.queue = queue
        self.attempt = attempt  # 1-based: the server's delivery count
        self.policy = policy
        self.timeout = timeout
        self.started = started  # epoch seconds (the app's clock) when the attempt began
        # the task's options its app's middleware declared (taskq.middleware: task_options)
        self.middleware_options: Mapping[str, Any] = middleware_options or {}
        # True once a cancel was asked for: code that cannot be interrupted (a `def` task in
        # a thread) checks it and returns early; the attempt is settled as cancelled
        self.cancelled = False
        self.reporter: Reporter | None = None
        self._logger: logging.LoggerAdapter[logging.Logger] | None = None

    def progress(self, value: float | dict[str, Any], message: str | None = None) -> None:
        """Report progress: a number from 0 to 1 or a JSON-able dict, and a message. Cheap
        in a tight loop: the worker stores at most a few updates per second, and the last."""
        value, message = checked(value, message)
        if self.reporter is not None:
            self.reporter(self, value, message)

    @property
    def id(self) -> str:
        return self.envelope.id

    @property
    def task(self) -> str:
        return self.envelope.task

    @property
    def max_attempts(self) -> int:
        return self.policy.attempts

    @property
    def meta(self) -> dict[str, Any]:
        return self.envelope.meta

    @property
    def headers(self) -> Mapping[str, str]:
        return self.envelope.headers

    @property
    def subject(self) -> str:
        return self.envelope.subject

    @property
    def enqueued_at(self) -> datetime | None:
        text = self.envelope.enqueued_at
        return parse_time(text) if text else None

    @property
    def deadline(self) -> datetime | None:
        """When the task's `timeout` ends this attempt (None: no timeout)."""
        if self.timeout is None:
            return None
        return datetime.fromtimestamp(self.started, UTC) + timedelta(seconds=self.timeout)

    def now(self) -> datetime:
        """The current time as the engine sees it: the wall clock, plus what a
        time-skipping test skipped (taskq.clock)."""
        return self.clock.now()

    def remaining(self, now: datetime | None = None) -> float | None:
        """Seconds left before the timeout (None: no timeout)."""
        deadline = self.deadline
        if deadline is None:
            return None
        return max(0.0, (deadline - (now or self.clock.now())).total_seconds())

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose lines start with `task[id]` and carry `taskq_id` etc. as extras."""
        if self._logger is None:
            self._logger = _TaskLogger(_LOG, self)
        return self._logger

    def __repr__(self) -> str:
        return f"<TaskContext {self.task}[{self.id}] attempt {self.attempt}/{self.max_attempts}>"


class _TaskLogger(logging.LoggerAdapter[logging.Logger]):
    def __init__(self, logger: logging.Logger, ctx: TaskContext) -> None:
        extra = {"taskq_id": ctx.id, "taskq_task": ctx.task, "taskq_attempt": ctx.attempt}
        super().__init__(logger, extra)
        self._head = f"{ctx.task}[{ctx.id}] "

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return f"{self._head}{msg}", kwargs


def current() -> TaskContext:
    """The running task's context; raises NoTaskContext outside a task."""
    ctx = _CURRENT.get()
    if ctx is None:
        raise NoTaskContext()
    return ctx


def enter(ctx: TaskContext) -> Token[TaskContext | None]:
    """Make `ctx` current (the worker does this around each attempt)."""
    return _CURRENT.set(ctx)


def leave(token: Token[TaskContext | None]) -> None:
    _CURRENT.reset(token)
