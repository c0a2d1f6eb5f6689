"""The reads behind a page of recent tasks (`taskq.operate.task_list`): which tasks to list
(`TaskFilters`), how one is listed (`ListedTask`), and the scan of one results bucket's
stream by sequence, backwards (`older`) or forwards (`newer`) from a cursor, in batched
direct gets with a budget of records read (`Scan`).

A scan lists a record only when it is its key's latest revision (one more batched direct
get, `multi_last`, for a window's candidates), and notes the stored times of the oldest
and newest records it read: how far in time it looked, for pages across several buckets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from taskq.client import Client
from taskq.errors import ConfigError
from taskq.nats import KVEntry
from taskq.operate.sequence_pages import MAX_WINDOW
from taskq.records.results import ResultRecord
from taskq.topology.names import check_queue, check_task

STATES = ("failed", "succeeded", "dead", "cancelled", "dropped")  # what a record can say
BUDGET = 5000  # records read at most for one page
MAX_PREFIX = 1024
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class TaskFilters:
    """Which tasks to list: by task name, queue, current state, and the start of the id
    (each None: any). ConfigError for a name, queue or state that cannot be one."""

    name: str | None = None
    queue: str | None = None
    state: str | None = None
    id_prefix: str | None = None

    def __post_init__(self) -> None:
        if self.name:
            check_task(self.name)
        if self.queue:
            check_queue(self.queue)
        if self.state and self.state not in STATES:
            raise ConfigError(f"state must be one of {', '.join(STATES)}, not {self.state!r}")
        if self.id_prefix and len(self.id_prefix) > MAX_PREFIX:
            raise ConfigError(f"an id prefix is at most {MAX_PREFIX} characters")

    def accepts(self, record: ResultRecord) -> bool:
        return (
            (not self.name or record.task == self.name)
            and (not self.queue or record.queue == self.queue)
            and (not self.state or record.state == self.state)
        )


@dataclass(frozen=True)
class ListedTask:
    """One task in a listing, from its current record (`seq`: the record's place in its
    bucket's stream, the cursor of the pages around it in a one-bucket layout; `stored`:
    when the server stored it, in microseconds since the epoch, the cursor across several
    buckets; not in `to_dict`)."""

    id: str
    task: str
    queue: str
    state: str
    attempts: int
    updated_at: str
    enqueued_at: str | None
    worker: str
    reason: str
    error: dict[str, str] | None
    seq: int
    stored: int = 0

    def to_dict(self) -> dict[str, Any]:
        shown = asdict(self)
        del shown["stored"]
        return shown


def micros(moment: datetime | None) -> int:
    """A stored time as microseconds since the epoch (0 for none): a page cursor."""
    if moment is None:
        return 0
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return (aware - EPOCH) // MICROSECOND


def moment(us: int) -> datetime:
    """The time of a cursor in microseconds since the epoch."""
    return EPOCH + us * MICROSECOND


@dataclass
class Scan:
    """Current records matching the filters in sequence ranges of one bucket's stream;
    `oldest_read` / `newest_read`: the stored times (µs) of the oldest and newest records
    it read, any record (None: none yet)."""

    client: Client
    filters: TaskFilters
    budget: int
    bucket: str
    scanned: int = 0
    oldest_read: int | None = None
    newest_read: int | None = None

    @property
    def spent(self) -> bool:
        return self.scanned >= self.budget

    async def window(self, start: int, end: int) -> list[ListedTask]:
        """The listed tasks whose current record has `start <= seq < end`, oldest first."""
        kv, bucket = self.client.connection.kv, self.bucket
        candidates: list[tuple[KVEntry, ResultRecord]] = []
        seq = start
        while seq < end:
            got = await kv.window(bucket, seq, min(end - seq, MAX_WINDOW))
            inside = [entry for entry in got if entry.revision < end]
            candidates += self._matching(inside)
            if len(inside) < len(got) or not got:
                break  # the window's end, or the stream's
            seq = got[-1].revision + 1
        current = await kv.latest(bucket, [entry.key for entry, _ in candidates])
        return [
            _listed(entry, record)
            for entry, record in candidates
            if current.get(entry.key) == entry.revision
        ]

    def _matching(self, entries: list[KVEntry]) -> list[tuple[KVEntry, ResultRecord]]:
        self._saw(entries)
        found = []
        prefix = self.filters.id_prefix
        for entry in entries:
            self.scanned += 1
            if entry.deleted or (prefix and not entry.key.startswith(prefix)):
                continue
            record = _record(entry.value)
            if record is not None and self.filters.accepts(record):
                found.append((entry, record))
        return found

    def _saw(self, entries: list[KVEntry]) -> None:
        """Note the stored times of a run of entries (in stream order: times never fall)."""
        if not entries:
            return
        first, last = micros(entries[0].created), micros(entries[-1].created)
        self.oldest_read = first if self.oldest_read is None else min(self.oldest_read, first)
        self.newest_read = last if self.newest_read is None else max(self.newest_read, last)


def _record(value: bytes) -> ResultRecord | None:
    try:
        return ResultRecord.model_validate_json(value)
    except ValidationError:
        return None  # a value this process cannot open, or not a record


def _listed(entry: KVEntry, record: ResultRecord) -> ListedTask:
    error = record.error
    return ListedTask(
        id=entry.key,
        task=record.task,
        queue=record.queue,
        state=record.state,
        attempts=record.attempts,
        updated_at=record.updated_at,
        enqueued_at=record.enqueued_at,
        worker=record.worker,
        reason=record.reason,
        error={"type": error.get("type", ""), "message": error.get("message", "")}
        if error
        else None,
        seq=entry.revision,
        stored=micros(entry.created),
    )
