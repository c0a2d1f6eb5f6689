"""Recent tasks, newest first: pages of the results bucket's records, filtered by task name,
queue, state and id prefix (`taskq tasks ls`, the dashboard's `/tasks`).

A page is read from the bucket's stream by sequence, backwards from its cursor, in batched
direct gets (64 values, doubling up to 1,024), like the dead letters' pages
(`taskq.dlq.pages`): the first page of 100,000 records is a round trip or two, never a read
of the whole bucket. The bucket keeps each task's last records (history 16), so a task is
listed once, by its current record: a record is shown only when it is its key's latest
revision, which one more batched direct get (`multi_last`) tells for a page's candidates.
Filters are checked record by record, with a budget of records read per page: a filter
that matches little ends the page early, and its `older` cursor goes on from there.

Listed are the tasks that have a record: an attempt settled (`failed` while a retry waits,
`succeeded`, `dead`), or it was `cancelled` or `dropped`. Tasks waiting or running for the
first time have none yet (the queue and workers pages show them). A task whose id is not
plain (`taskq.ids.safe_id`) is listed by its key, `h.<digest>`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pydantic import ValidationError

from taskq.client import Client, ClientSource
from taskq.errors import ConfigError, NotFound
from taskq.nats import KVEntry
from taskq.records.results import ResultRecord, ensure_results
from taskq.topology.names import check_queue, check_task

STATES = ("failed", "succeeded", "dead", "cancelled", "dropped")  # what a record can say
WINDOW = 64  # values read by a page's first batch; doubled up to MAX_WINDOW
MAX_WINDOW = 1024
BUDGET = 5000  # records read at most for one page
MAX_PREFIX = 1024


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
    """One task in a listing, from its current record (`seq`: the record's place in the
    bucket's stream, the cursor of the pages around it)."""

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TaskPage:
    """A page of tasks, newest first: `older` is the `before=` cursor of the next older
    page, `newer` the `after=` cursor of the next newer one (None: none); `scanned`
    counts the records read for it."""

    tasks: list[ListedTask]
    older: int | None
    newer: int | None
    scanned: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": [t.to_dict() for t in self.tasks],
            "older": self.older,
            "newer": self.newer,
            "scanned": self.scanned,
        }


@dataclass
class _Scan:
    """Current records matching the filters in sequence ranges of the bucket's stream."""

    client: Client
    filters: TaskFilters
    budget: int
    scanned: int = 0

    @property
    def spent(self) -> bool:
        return self.scanned >= self.budget

    async def window(self, start: int, end: int) -> list[ListedTask]:
        """The listed tasks whose current record has `start <= seq < end`, oldest first."""
        kv, bucket = self.client.connection.kv, self.client.names.results_bucket
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


async def recent(
    source: ClientSource,
    filters: TaskFilters | None = None,
    *,
    limit: int = 50,
    before: int | None = None,
    after: int | None = None,
    budget: int = BUDGET,
) -> TaskPage:
    """Tasks matching `filters`, newest first (by their current record): the newest
    `limit`, or those just older than sequence `before`, or just newer than `after`."""
    client = await source.client()
    await ensure_results(client)
    kv, bucket = client.connection.kv, client.names.results_bucket
    await kv.allow_direct_reads(bucket)
    try:
        first, last = await kv.span(bucket)
    except NotFound:
        return TaskPage([], None, None, 0)
    scan = _Scan(client, filters or TaskFilters(), budget)
    if after is not None:
        tasks, newer = await _newer(scan, after, last, limit)
        oldest = tasks[-1].seq if tasks else after + 1
        return TaskPage(tasks, oldest if oldest > first else None, newer, scan.scanned)
    top = last + 1 if before is None else min(before, last + 1)
    tasks, older = await _older(scan, first, top, limit)
    newer = None if before is None else (tasks[0].seq if tasks else top - 1)
    return TaskPage(tasks, older, newer, scan.scanned)


async def _older(
    scan: _Scan, low: int, high: int, limit: int
) -> tuple[list[ListedTask], int | None]:
    """Up to `limit` tasks below `high` (newest first) and the cursor below them: None
    when the stream's start was reached."""
    found: list[ListedTask] = []
    window = WINDOW
    while high > low and len(found) <= limit and not scan.spent:
        start = max(low, high - window)
        found += reversed(await scan.window(start, high))
        high = start
        window = min(window * 2, MAX_WINDOW)
    if len(found) > limit:
        return found[:limit], found[limit - 1].seq
    return found, high if high > low else None


async def _newer(
    scan: _Scan, after: int, last: int, limit: int
) -> tuple[list[ListedTask], int | None]:
    """Up to `limit` tasks just above `after` (shown newest first) and the cursor above
    them: None when the stream's end was reached."""
    found: list[ListedTask] = []
    seq, window = after + 1, WINDOW
    while seq <= last and len(found) <= limit and not scan.spent:
        end = min(last + 1, seq + window)
        found += await scan.window(seq, end)
        seq = end
        window = min(window * 2, MAX_WINDOW)
    if len(found) > limit:
        shown = found[:limit]
        return list(reversed(shown)), shown[-1].seq
    return list(reversed(found)), seq - 1 if seq <= last else None


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
    )
