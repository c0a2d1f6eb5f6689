"""Reading the dead-letter stream: list, filter and fetch records without consuming them."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from pydantic import ValidationError

from taskq.client import ClientSource
from taskq.dlq.record import (
    ID_HEADER,
    QUEUE_HEADER,
    REASON_HEADER,
    DeadLetter,
    ErrorInfo,
    SealedOriginal,
)
from taskq.errors import DecodeError, NotFound
from taskq.nats import StoredMessage
from taskq.records.clock import format_epoch, format_time, parse_time
from taskq.records.envelope import TASK_HEADER
from taskq.records.places import Seals
from taskq.records.sealing import is_sealed, sealed_with
from taskq.topology.names import Names

log = logging.getLogger("taskq.dlq")


@dataclass(frozen=True)
class Filters:
    """Which dead letters an operation applies to; empty means all."""

    queue: str | None = None
    task: str | None = None
    reason: str | None = None
    since: float | None = None  # seconds: only records that failed within this window
    until: float | None = None  # seconds: only records that failed at least this long ago
    text: str | None = None  # only records whose error (type, message, traceback) holds it

    @property
    def empty(self) -> bool:
        """True when nothing is filtered out."""
        return self.by_subject and not (self.queue or self.task)

    @property
    def by_subject(self) -> bool:
        """True when the subject filter alone selects the records (no filter on their
        content), so the server can count them."""
        return not (self.reason or self.since or self.until or self.text)

    def subject(self, names: Names) -> str:
        """The narrowest subject filter: queue and task are subject tokens."""
        return names.dlq_filter_for(self.queue, self.task)

    def accepts(self, record: DeadLetter, now: float) -> bool:
        """Whether `record` passes the filters the subject cannot express (at time `now`)."""
        if self.reason and record.reason != self.reason:
            return False
        if self.text and not _mentions(record, self.text):
            return False
        if self.since is None and self.until is None:
            return True
        age = now - parse_time(record.failed_at).timestamp()
        return (self.since is None or age <= self.since) and (
            self.until is None or age >= self.until
        )


def _mentions(record: DeadLetter, text: str) -> bool:
    """Whether the record's error holds `text` (case-insensitive)."""
    error = record.error
    return text.casefold() in f"{error.type}: {error.message}\n{error.traceback}".casefold()


def parse(stored: StoredMessage, seals: Seals | None = None) -> DeadLetter:
    """The record in a stored DLQ message (its `seq` filled in). A body still sealed (this
    process lacks its key) is no JSON to validate: it is a sealed letter, what its headers
    say (`seals`, the reading connection's, tell why it does not open)."""
    if is_sealed(stored.data):
        return sealed_letter(stored, _why_sealed(stored, seals))
    record = DeadLetter.model_validate_json(stored.data)
    return record.model_copy(update={"seq": stored.seq})


def sealed_letter(stored: StoredMessage, why: str) -> DeadLetter:
    """A dead letter this process cannot open, from its headers (written beside the sealed
    body for routing and filters): its id, task, queue and reason, when it was stored, and
    `why` as its error, so a listing says it is sealed. Its message is a SealedOriginal,
    which nothing requeues or exports."""
    headers = stored.headers
    original = SealedOriginal(
        sealed=why, id=headers.get(ID_HEADER) or None, task=headers.get(TASK_HEADER) or None
    )
    return DeadLetter(
        message=original,
        reason=headers.get(REASON_HEADER) or "?",
        error=ErrorInfo(type="", message=why),
        attempts=0,  # unknown: it is inside the sealed body
        queue=headers.get(QUEUE_HEADER) or "?",
        original_seq=0,
        failed_at=format_time(stored.time) if stored.time else format_epoch(0),
        worker="",
        seq=stored.seq,
    )


def _why_sealed(stored: StoredMessage, seals: Seals | None) -> str:
    """Why a sealed body does not open here, as the sealer says it (the key it names, and
    whether this process has none, or another)."""
    if seals is not None:
        try:
            seals.open(stored.subject, stored.headers, stored.data)
        except DecodeError as exc:
            return exc.reason
    return f"sealed with encryption key {sealed_with(stored.data)}, which does not open here"


async def iter_stored(
    source: ClientSource,
    filters: Filters | None = None,
    progress: Callable[[int], None] | None = None,
) -> AsyncIterator[tuple[StoredMessage, DeadLetter]]:
    """Matching DLQ messages with their records, oldest first. Unreadable messages are
    skipped with a warning; no DLQ stream yet means nothing has ever died. `progress(1)` is
    called for every message read (matching or not: `count_stored` is the total)."""
    filters = filters or Filters()
    client = await source.client()
    now = time.time()
    reader = client.connection.messages.read(client.names.dlq_stream, filters.subject(client.names))
    try:
        async for stored in reader:
            if progress:
                progress(1)
            try:
                record = parse(stored, client.codec.seals)
            except ValidationError as exc:
                log.warning("DLQ message %d is not a dead-letter record: %s", stored.seq, exc)
                continue
            if filters.accepts(record, now):
                yield stored, record
    except NotFound:
        return


async def count_stored(source: ClientSource, filters: Filters | None = None) -> int:
    """How many DLQ messages `iter_stored` reads for `filters` (those on its subjects)."""
    client = await source.client()
    names = client.names
    subject = (filters or Filters()).subject(names)
    try:
        state = await client.connection.streams.state(names.dlq_stream, subjects_filter=subject)
    except NotFound:
        return 0
    return sum(state.subjects.values())


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
        if int(ref) < 1:  # sequences start at 1: the server answers 0 with a bad request
            return None
        try:
            stored = await client.connection.messages.get(client.names.dlq_stream, int(ref))
        except NotFound:
            return None
        return parse(stored, client.codec.seals) if stored is not None else None
    async for record in iter_dead(client):
        if record.id == ref:
            return record
    return None
