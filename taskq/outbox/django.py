"""Django's way to the outbox: `enqueue_in(task, *args, using="default")` writes the task
through `django.db.connections[using]` inside the current `transaction.atomic()` block, as
`task.enqueue_in(connection, ...)` does; `enqueue_on_commit` is Celery's `delay_on_commit`
(the task is published after the commit, and lost if the process dies in between: use
`enqueue_in` where that matters). The table: `taskq outbox init --db URL`, or the SQL in
docs/outbox.md as a migration."""

from __future__ import annotations

from typing import Any

from taskq.handle import TaskHandle
from taskq.task import Task, TaskCall


def _call(task: Task[Any, Any] | TaskCall) -> TaskCall:
    return task if isinstance(task, TaskCall) else task.options()


def enqueue_in(
    task: Task[Any, Any] | TaskCall, *args: Any, using: str = "default", **kwargs: Any
) -> TaskHandle:
    """Write a run of `task` (or of `task.options(...)`) into the outbox, in the current
    transaction of the database `using`."""
    from django.db import connections

    return _call(task).enqueue_in(connections[using], *args, **kwargs)


def enqueue_on_commit(
    task: Task[Any, Any] | TaskCall, *args: Any, using: str = "default", **kwargs: Any
) -> None:
    """Enqueue a run of `task` once the current transaction of `using` commits (at once
    outside one); nothing if it rolls back. Not crash-safe: see `enqueue_in`."""
    from django.db import transaction

    call = _call(task)
    call.task.validator.for_wire(args, kwargs)  # bad arguments fail here, not after commit
    transaction.on_commit(lambda: call.delay(*args, **kwargs), using=using)
