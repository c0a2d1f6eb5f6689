"""Taking committed rows for publishing, and deleting them once published. On Postgres
several relays share the table: each takes whole queues (an advisory lock per queue for the
transaction, so a queue's rows go out in order) and skips rows another relay has locked;
SQLite has one relay."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from taskq.outbox.table import outbox

LOCK_CLASS = 0x7471  # advisory locks' first key: "tq", the second the queue's hash
DELETE_CHUNK = 1000  # ids per DELETE statement (well under SQLite's parameter limit)


@dataclass(frozen=True)
class Row:
    """One outbox row as the relay read it."""

    id: int
    task_id: str
    queue: str
    partition_key: str | None
    priority: int | None
    body: bytes


async def claim(connection: AsyncConnection, prefix: str, limit: int) -> list[Row]:
    """Up to `limit` rows of `prefix`, oldest first, locked by this transaction."""
    query = (
        select(
            outbox.c.id,
            outbox.c.task_id,
            outbox.c.queue,
            outbox.c.partition_key,
            outbox.c.priority,
            outbox.c.body,
        )
        .where(outbox.c.prefix == prefix)
        .order_by(outbox.c.id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        queue_key = func.hashtext(outbox.c.prefix + "/" + outbox.c.queue)
        query = query.where(func.pg_try_advisory_xact_lock(LOCK_CLASS, queue_key))
        query = query.with_for_update(skip_locked=True)
    result = await connection.execute(query)
    rows = [
        Row(r.id, r.task_id, r.queue, r.partition_key, r.priority, bytes(r.body)) for r in result
    ]
    if connection.dialect.name == "postgresql":
        rows = await _oldest_only(connection, prefix, rows)
    return rows


async def _oldest_only(connection: AsyncConnection, prefix: str, rows: list[Row]) -> list[Row]:
    """`rows` of the queues whose oldest row they start with; the rest wait for the next
    pass. The advisory lock is tried row by row as the scan goes: a scan that reaches a
    queue's later rows the moment another relay commits its earlier ones (and lets the lock
    go) takes them, and rows skipped as locked are older too; either way publishing them
    now would put them ahead of that queue's older rows."""
    firsts: dict[str, int] = {}
    for row in rows:
        firsts.setdefault(row.queue, row.id)
    kept = set()
    for queue, first in firsts.items():
        oldest = select(func.min(outbox.c.id)).where(
            outbox.c.prefix == prefix, outbox.c.queue == queue
        )
        if await connection.scalar(oldest) == first:
            kept.add(queue)
    return [row for row in rows if row.queue in kept]


async def remove(connection: AsyncConnection, ids: list[int]) -> None:
    """Delete the rows `ids` (published or dead-lettered)."""
    for start in range(0, len(ids), DELETE_CHUNK):
        chunk = ids[start : start + DELETE_CHUNK]
        await connection.execute(delete(outbox).where(outbox.c.id.in_(chunk)))
