"""Pages of dead letters, newest first, read by stream sequence around a cursor.

A page costs a few batched direct gets next to its cursor, however long the DLQ is: the
first page of 10,000 records is one round trip, never a read of the whole stream. Filters
the subject can express (queue, task) are applied by the server; the others (reason, time,
text) are checked record by record, with a budget of records read per page so that a
filter matching little cannot make one page read everything: the page then ends early,
and its `older` cursor continues the search where it stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pydantic import ValidationError

from taskq.client import Client, ClientSource
from taskq.dlq.browse import Filters, log, parse
from taskq.dlq.record import DeadLetter
from taskq.errors import NotFound
from taskq.nats import StoredMessage
from taskq.operate import sequence_pages
from taskq.operate.sequence_pages import MAX_WINDOW
from taskq.records.places import Seals

BUDGET = 5000  # records read at most for one page


@dataclass(frozen=True)
class Page:
    """One page of dead letters (newest first) and the cursors around it.

    `older` is the `before=` cursor of the next older page, `newer` the `after=` cursor of
    the next newer one (None: there is none). `total` counts the matching records when the
    server can (subject filters only), else None; `scanned` is how many records were read.
    """

    records: list[DeadLetter]
    older: int | None
    newer: int | None
    scanned: int
    total: int | None


@dataclass
class _Scan:
    """Matching records in sequence ranges of the DLQ stream, counting what it reads."""

    client: Client
    filters: Filters
    budget: int
    now: float = field(default_factory=time.time)
    scanned: int = 0

    @property
    def spent(self) -> bool:
        return self.scanned >= self.budget

    async def window(self, start: int, end: int) -> list[DeadLetter]:
        """The matching records with `start <= seq < end`, oldest first."""
        names, messages = self.client.names, self.client.connection.messages
        subject = self.filters.subject(names)
        found: list[DeadLetter] = []
        seq = start
        while seq < end:
            got = await messages.batch(names.dlq_stream, seq, min(end - seq, MAX_WINDOW), subject)
            for stored in got:
                if stored.seq >= end:  # a sparse subject reaches past the window
                    return found
                self.scanned += 1
                record = _parse(stored, self.client.codec.seals)
                if record is not None and self.filters.accepts(record, self.now):
                    found.append(record)
            if not got:
                return found
            seq = got[-1].seq + 1
        return found


async def page(
    source: ClientSource,
    filters: Filters | None = None,
    *,
    limit: int = 50,
    before: int | None = None,
    after: int | None = None,
    budget: int = BUDGET,
) -> Page:
    """Matching dead letters newest first: the newest `limit`, or those just older than
    sequence `before`, or just newer than sequence `after`."""
    client = await source.client()
    filters = filters or Filters()
    try:
        state = await client.connection.streams.state(
            client.names.dlq_stream, subjects_filter=filters.subject(client.names)
        )
    except NotFound:  # no DLQ stream yet: nothing ever died
        return Page([], None, None, 0, 0)
    total = sum(state.subjects.values()) if filters.by_subject else None
    scan = _Scan(client, filters, budget)
    if after is not None:
        records, newer = await sequence_pages.newer(scan, after, state.last_seq, limit)
        oldest = records[-1].seq if records else after + 1
        older = oldest if oldest > state.first_seq else None
        return Page(records, older, newer, scan.scanned, total)
    top = state.last_seq + 1 if before is None else min(before, state.last_seq + 1)
    records, older = await sequence_pages.older(scan, state.first_seq, top, limit)
    newer = None if before is None else (records[0].seq if records else top - 1)
    return Page(records, older, newer, scan.scanned, total)


def _parse(stored: StoredMessage, seals: Seals) -> DeadLetter | None:
    try:
        return parse(stored, seals)
    except ValidationError as exc:
        log.warning("DLQ message %d is not a dead-letter record: %s", stored.seq, exc)
        return None
