"""Recent tasks, newest first: pages of the results buckets' records, filtered by task name,
queue, state and id prefix (`taskq tasks ls`, the dashboard's `/tasks`).

A page is read from a bucket's stream by sequence, backwards from its cursor, in batched
direct gets (64 values, doubling up to 1,024), like the dead letters' pages
(`taskq.dlq.pages`): the first page of 100,000 records is a round trip or two, never a read
of the whole bucket. The bucket keeps each task's last records (history 16), so a task is
listed once, by its current record: a record is shown only when it is its key's latest
revision, which one more batched direct get (`multi_last`) tells for a page's candidates.
Filters are checked record by record, with a budget of records read per page: a filter
that matches little ends the page early, and its `older` cursor goes on from there. The
reads themselves are `taskq.operate.task_scan`'s.

With one results bucket (the default layout) the cursors are stream sequences. With
several (`results_partitions` > 1, or the buckets an earlier layout left) they are times:
when the server stored the records, in microseconds since the epoch. A page then reads
each bucket from the sequence stored at its cursor time on (`KeyValue.seq_at`, one direct
get by `start_time`), by sequence as above with the budget shared between the buckets,
and merges what they found newest first by stored time. A page ends at a microsecond's
boundary below which some bucket was not read (its budget spent) or the `limit`'s task
lies, so records stored in the same microsecond (in one bucket or several) are all on the
same page; only more than a page of matching tasks in one microsecond would lose those
past the page's end.

Listed are the tasks that have a record: an attempt settled (`failed` while a retry waits,
`succeeded`, `dead`), or it was `cancelled` or `dropped`. Tasks waiting or running for the
first time have none yet (the queue and workers pages show them). A task whose id is not
plain (`taskq.ids.safe_id`) is listed by its key, `h.<digest>`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from taskq.client import Client, ClientSource
from taskq.errors import NotFound
from taskq.operate.sequence_pages import newer, older
from taskq.operate.task_scan import (
    BUDGET,
    STATES,
    ListedTask,
    Scan,
    TaskFilters,
    moment,
)
from taskq.records.results import ensure_results

__all__ = ["BUDGET", "STATES", "ListedTask", "TaskFilters", "TaskPage", "recent"]


@dataclass(frozen=True)
class TaskPage:
    """A page of tasks, newest first: `older` is the `before=` cursor of the next older
    page, `newer` the `after=` cursor of the next newer one (None: none); `scanned`
    counts the records read for it. Cursors are stream sequences with one results bucket,
    stored times in microseconds with several."""

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
    `limit`, or those just older than cursor `before`, or just newer than `after`."""
    client = await source.client()
    await ensure_results(client)
    buckets = await _readable(client)
    share = max(1, budget // max(1, len(buckets)))
    scans = [Scan(client, filters or TaskFilters(), share, bucket) for bucket in buckets]
    if not scans:
        return TaskPage([], None, None, 0)
    if len(scans) == 1:
        return await _by_sequence(scans[0], limit, before, after)
    if after is not None:
        return await _newer_by_time(scans, limit, after)
    return await _older_by_time(scans, limit, before)


async def _readable(client: Client) -> list[str]:
    """Every results bucket of the prefix on the server, each let answer batched direct
    gets (one deleted since the listing was made is left out)."""
    found = []
    for bucket in await client.results.existing():
        try:
            await client.connection.kv.allow_direct_reads(bucket)
        except NotFound:
            continue
        found.append(bucket)
    return found


async def _by_sequence(scan: Scan, limit: int, before: int | None, after: int | None) -> TaskPage:
    """A page of the one results bucket: its cursors are stream sequences."""
    try:
        first, last = await scan.client.connection.kv.span(scan.bucket)
    except NotFound:
        return TaskPage([], None, None, 0)
    if after is not None:
        tasks, newer_at = await newer(scan, after, last, limit)
        oldest = tasks[-1].seq if tasks else after + 1
        return TaskPage(tasks, oldest if oldest > first else None, newer_at, scan.scanned)
    top = last + 1 if before is None else min(before, last + 1)
    tasks, older_at = await older(scan, first, top, limit)
    newer_at = None if before is None else (tasks[0].seq if tasks else top - 1)
    return TaskPage(tasks, older_at, newer_at, scan.scanned)


@dataclass(frozen=True)
class _Reach:
    """What one bucket gave a page read by time: up to `limit` + 1 tasks, and `edge`, the
    stored time (µs) of the last record read when the bucket has more that way (None:
    it was read to its end); `behind`: it holds records stored before an `after` cursor."""

    tasks: list[ListedTask]
    edge: int | None
    behind: bool = False


async def _older_in(scan: Scan, limit: int, before: int | None) -> _Reach:
    """A bucket's tasks stored before `before` (µs; None: the newest), newest first."""
    kv = scan.client.connection.kv
    try:
        first, last = await kv.span(scan.bucket)
    except NotFound:
        return _Reach([], None)
    high = last + 1
    if before is not None:
        high = await kv.seq_at(scan.bucket, moment(before)) or high
    tasks, cursor = await older(scan, first, high, limit + 1)
    # more below: every record stored after the oldest one read was read (a spent budget
    # read at least one record)
    return _Reach(tasks, None if cursor is None else scan.oldest_read)


async def _newer_in(scan: Scan, limit: int, after: int) -> _Reach:
    """A bucket's tasks stored at or after `after` (µs), newest first."""
    kv = scan.client.connection.kv
    try:
        first, last = await kv.span(scan.bucket)
    except NotFound:
        return _Reach([], None)
    start = await kv.seq_at(scan.bucket, moment(after))
    behind = 0 < first <= last and (start is None or start > first)
    if start is None:
        return _Reach([], None, behind)
    tasks, cursor = await newer(scan, start - 1, last, limit + 1)
    return _Reach(tasks, None if cursor is None else scan.newest_read, behind)


async def _older_by_time(scans: list[Scan], limit: int, before: int | None) -> TaskPage:
    """The page of several buckets stored before `before` (None: the newest)."""
    reaches = await asyncio.gather(*(_older_in(scan, limit, before) for scan in scans))
    shown, bottom = _down(reaches, limit, before)
    return TaskPage(shown, bottom, before, sum(scan.scanned for scan in scans))


async def _newer_by_time(scans: list[Scan], limit: int, after: int) -> TaskPage:
    """The page of several buckets stored at or after `after`."""
    reaches = await asyncio.gather(*(_newer_in(scan, limit, after) for scan in scans))
    shown, top = _up(reaches, limit, after)
    older_at = after if any(r.behind for r in reaches) else None
    return TaskPage(shown, older_at, top, sum(scan.scanned for scan in scans))


def _down(
    reaches: list[_Reach], limit: int, before: int | None
) -> tuple[list[ListedTask], int | None]:
    """The tasks of a page going down, newest first, and its `older` cursor: the page
    ends just above the highest edge below which some bucket was not read, or the
    microsecond of the task past the `limit` (None: every bucket read to its start)."""
    found = sorted((t for r in reaches for t in r.tasks), key=_stored, reverse=True)
    edges = [r.edge for r in reaches if r.edge is not None]
    if len(found) > limit:
        edges.append(found[limit].stored)
    if not edges:
        return found, None
    bottom = max(edges) + 1  # from here up every bucket was read: what is shown
    if before is not None and bottom >= before:
        bottom -= 1  # no step down: more than a page in one µs, its rest skipped
    return [t for t in found if t.stored >= bottom][:limit], bottom


def _up(reaches: list[_Reach], limit: int, after: int) -> tuple[list[ListedTask], int | None]:
    """The tasks of a page going up, newest first, and its `newer` cursor: the page ends
    at the lowest edge above which some bucket was not read, or the microsecond of the
    task past the `limit` (None: every bucket read to its end)."""
    found = sorted((t for r in reaches for t in r.tasks), key=_stored)
    edges = [r.edge for r in reaches if r.edge is not None]
    if len(found) > limit:
        edges.append(found[limit].stored)
    if not edges:
        return found[::-1], None
    top = min(edges)  # below it every bucket was read: what is shown
    if top <= after:
        top += 1  # no step up: more than a page in one µs, its rest skipped
    return [t for t in found if t.stored < top][:limit][::-1], top


def _stored(task: ListedTask) -> tuple[int, int, str]:
    """Order by stored time: records of one microsecond by sequence in their bucket, and
    by key across buckets (which of them the server stored first is not known)."""
    return task.stored, task.seq, task.id
