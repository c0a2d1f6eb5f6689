"""What a relay tells of its outbox: the backlog (rows waiting, age of the oldest) read from
the table every heartbeat and written as a RelayReport (taskq.records.relays), and the
backlog query `taskq outbox status` runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from taskq.client import Client
from taskq.outbox.database import checked, shown
from taskq.outbox.table import outbox
from taskq.records.clock import now_iso
from taskq.records.heartbeats import worker_name
from taskq.records.relays import RelayReport, write_report

log = logging.getLogger("taskq.outbox")


@dataclass(frozen=True)
class Backlog:
    """Rows waiting for one prefix, and the age in seconds of the oldest (0: none)."""

    prefix: str
    rows: int
    oldest_age: float


async def backlogs(connection: AsyncConnection, prefix: str | None = None) -> list[Backlog]:
    """The backlog of every prefix with rows (or of `prefix` alone)."""
    query = select(outbox.c.prefix, func.count(), func.min(outbox.c.created_at)).group_by(
        outbox.c.prefix
    )
    if prefix is not None:
        query = query.where(outbox.c.prefix == prefix)
    now = datetime.now(UTC)
    found = [
        Backlog(p, int(n), _age(oldest, now)) for p, n, oldest in await connection.execute(query)
    ]
    if prefix is not None and not found:
        found = [Backlog(prefix, 0, 0.0)]
    return sorted(found, key=lambda b: b.prefix)


def _age(written: datetime | None, now: datetime) -> float:
    if written is None:
        return 0.0
    if written.tzinfo is None:  # SQLite keeps no zone: written in UTC
        written = written.replace(tzinfo=UTC)
    return max(0.0, (now - written).total_seconds())


class Reporter:
    """Writes this relay's report every heartbeat (a failure to is logged, never fatal)."""

    def __init__(self, client: Client, url: str, database: AsyncEngine) -> None:
        self.client, self.url, self.database = client, url, database
        self.every = client.settings.heartbeat
        self.window = client.settings.duplicate_window
        self._due = 0.0
        self._job: asyncio.Task[None] | None = None
        self.last: Backlog | None = None

    def maybe_report(self, stats: Counter[str]) -> None:
        """Start this beat's report in the background, unless one is still under way (a
        report waits for NATS or the database; the relay never waits for a report)."""
        if time.monotonic() < self._due or (self._job is not None and not self._job.done()):
            return
        self._due = time.monotonic() + self.every
        self._job = asyncio.create_task(self._write(stats))

    async def _write(self, stats: Counter[str]) -> None:
        try:
            async with self.database.connect() as connection:
                [self.last] = await backlogs(connection, self.client.settings.prefix)
            await write_report(self.client, self._report(self.last, stats))
        except Exception as exc:  # the database or NATS away: next beat
            log.debug("outbox report failed: %s", exc)

    async def close(self) -> None:
        if self._job is not None:
            self._job.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._job

    def _report(self, backlog: Backlog, stats: Counter[str]) -> RelayReport:
        return RelayReport(
            relay=worker_name(),
            database=shown(self.url),
            backlog=backlog.rows,
            oldest_age=round(backlog.oldest_age, 3),
            published=stats["published"],
            dead=stats["dead"],
            reported_at=now_iso(),
            beyond_dedup=backlog.oldest_age > self.window,
        )


async def read_backlogs(url: str, prefix: str | None) -> list[Backlog]:
    """`taskq outbox status`: the backlogs in the database at `url`."""
    database = await checked(url)
    try:
        async with database.connect() as connection:
            return await backlogs(connection, prefix)
    finally:
        await database.dispose()
