"""Reading the dead-letter stream: list, filter and fetch records without consuming them."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pydantic import ValidationError

from taskq.client import ClientSource
from taskq.dlq.record import DeadLetter
from taskq.envelope import parse_time
from taskq.errors import NotFound
from taskq.nats import StoredMessage
from taskq.topology.names import Names

log = logging.getLogger("taskq.dlq")


@dataclass(frozen=True)
class Filters:
    """Which dead letters an operation applies to; empty means all."""

    queue: str | None = None
    task: str | None = None
    reason: str | None = None
    since: float | None = None  # seconds: only records that failed within this window

    @property
    def empty(self) -> bool:
        """True when nothing is filtered out."""
        return not (self.queue or self.task or self.reason or self.since)

    def subject(self, names: Names) -> str:
        """The narrowest subject filter: queue and task are subject tokens."""
        return names.dlq_filter_for(self.queue, self.task)

    def accepts(self, record: DeadLetter, now: float) -> bool:
        """Whether `record` passes the filters the subject cannot express (at time `now`)."""
        if self.reason and record.reason != self.reason:
            return False
        if self.since is not None:
            return parse_time(record.failed_at).timestamp() >= now - self.since
        return True


def parse(stored: StoredMessage) -> DeadLetter:
    """The record in a stored DLQ message (its `seq` filled in)."""
    record = DeadLetter.model_validate_json(stored.data)
    return record.model_copy(update={"seq": stored.seq})


async def iter_stored(
    source: ClientSource, filters: Filters | None = None
) -> AsyncIterator[tuple[StoredMessage, DeadLetter]]:
    """Matching DLQ messages with their records, oldest first. Unreadable messages are
    skipped with a warning; no DLQ stream yet means nothing has ever died."""
    filters = filters or Filters()
    client = await source.client()
    now = time.time()
    reader = client.connection.messages.read(client.names.dlq_stream, filters.subject(client.names))
    try:
        async for stored in reader:
            try:
                record = parse(stored)
            except ValidationError as exc:
                log.warning("DLQ message %d is not a dead-letter record: %s", stored.seq, exc)
                continue
            if filters.accepts(record, now):
                yield stored, record
    except NotFound:
        return


async def iter_dead(
    source: ClientSource, filters: Filters | None = None
) -> AsyncIterator[DeadLetter]:
    """Matching dead letters, oldest first."""
    async for _, record in iter_stored(source, filters):
        yield record


async def list_dead(
    source: ClientSource,
    filters: Filters | None = None,
    limit: int | None = None,
    newest_first: bool = False,
) -> list[DeadLetter]:
    """Matching dead letters as a list (oldest first unless `newest_first`)."""
    records = [r async for r in iter_dead(source, filters)]
    if newest_first:
        records.reverse()
    return records[:limit] if limit is not None else records


async def get_dead(source: ClientSource, ref: str) -> DeadLetter | None:
    """A dead letter by DLQ sequence number (digits) or by task id."""
    client = await source.client()
    if ref.isdigit():
        try:
            stored = await client.connection.messages.get(client.names.dlq_stream, int(ref))
        except NotFound:
            return None
        return parse(stored) if stored is not None else None
    async for record in iter_dead(client):
        if record.id == ref:
            return record
    return None
