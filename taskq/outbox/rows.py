"""Writing a task into the outbox, inside the caller's transaction: the row of one call
(arguments validated, id fixed, options checked, as `enqueue` does them) and its insert
through a SQLAlchemy Connection or Session (sync or async) or a Django connection."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, insert, select

from taskq.errors import ConfigError
from taskq.handle import TaskHandle
from taskq.outbox.database import dialect_of
from taskq.outbox.table import CHANNEL, TABLE, outbox
from taskq.topology.names import check_queue
from taskq.tracing import carry

# the trace context of the request that wrote a row (its traceparent, tracestate), kept in
# the body's meta under this key: the relay makes it the message's headers again
# (taskq.outbox.publish), so the task's spans join the request's trace
TRACE_META = "taskq.trace"

if TYPE_CHECKING:
    from taskq.task import TaskCall

COLUMNS = ("prefix", "task_id", "queue", "partition_key", "priority", "body", "created_at")


def row_of(call: TaskCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The outbox row of `call(*args, **kwargs)`: ArgumentsError or ConfigError now, at the
    call, as `enqueue` raises them (nothing is written)."""
    task, opts = call.task, call.opts
    if opts.gate.active:
        raise ConfigError(
            "enqueue_in takes no unique_for, debounce or throttle: their windows live on the "
            "NATS server, not in the transaction; use enqueue after the commit"
        )
    envelope = task.build_envelope(args, kwargs, opts)
    context = carry({})  # nothing when no span runs (always, when tracing is off)
    if context:
        envelope = replace(envelope, meta={**envelope.meta, TRACE_META: context})
    queue = check_queue(opts.queue or task.queue)
    task.level(opts.priority)  # a per-call priority a lane refuses, refused now
    return {
        "prefix": task.app.settings.prefix,
        "task_id": envelope.id,
        "queue": queue,
        "partition_key": opts.partition_key or opts.key,
        "priority": opts.priority,
        "body": envelope.encode(),
        "created_at": datetime.now(UTC),
    }


def handle_of(call: TaskCall, row: dict[str, Any]) -> TaskHandle:
    """The handle of a written row: its id is the task's; `seq` 0 until the relay publishes."""
    return TaskHandle(row["task_id"], call.task.name, row["queue"], 0, app=call.task.app)


def write(db: Any, call: TaskCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskHandle:
    """Insert the call's row through `db` (its current transaction), waking the relays on
    commit where the database can (Postgres NOTIFY is delivered at commit, folded per
    transaction)."""
    row = row_of(call, args, kwargs)
    if _is_django(db):
        _write_django(db, row)
    else:
        db.execute(insert(outbox), [row])
        if dialect_of(db) == "postgresql":
            db.execute(select(func.pg_notify(CHANNEL, "")))
    return handle_of(call, row)


async def write_async(
    db: Any, call: TaskCall, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> TaskHandle:
    """`write` through an AsyncConnection or AsyncSession."""
    row = row_of(call, args, kwargs)
    await db.execute(insert(outbox), [row])
    if dialect_of(db) == "postgresql":
        await db.execute(select(func.pg_notify(CHANNEL, "")))
    return handle_of(call, row)


def _is_django(db: Any) -> bool:
    return type(db).__module__.startswith("django.") or hasattr(db, "_connections")


def _write_django(db: Any, row: dict[str, Any]) -> None:
    """The row through a Django connection (`django.db.connection` or `connections[alias]`)."""
    connection = getattr(db, "_connections", None)
    connection = connection[db._alias] if connection is not None else db  # the proxy's
    columns = ", ".join(COLUMNS)
    marks = ", ".join(["%s"] * len(COLUMNS))
    values = dict(row)
    if connection.vendor == "sqlite":  # as SQLAlchemy stores it there (and reads it back)
        values["created_at"] = row["created_at"].strftime("%Y-%m-%d %H:%M:%S.%f")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} ({columns}) VALUES ({marks})", [values[c] for c in COLUMNS]
        )
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])
