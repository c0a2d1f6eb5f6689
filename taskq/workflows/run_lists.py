"""Durable workflow runs listed by state and name (`taskq workflows ls`, the dashboard's
runs page), from the server alone.

A listing reads the runs bucket (`<PREFIX>_RUNS`, history 1) backwards by stream sequence
from its cursor, in batched direct gets, within a budget per page, like the task list
(`taskq.operate.task_list`). A summary is rewritten whenever its run's state changes and the
bucket keeps only the latest, so the stream's order is the runs' order of last change, and
every summary read is current."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taskq.client import Client
from taskq.errors import ConfigError, NotFound
from taskq.nats import KVEntry
from taskq.states import LEGACY_RUN
from taskq.topology.names import check_task
from taskq.workflows import store

PAGE = 100  # runs a page lists unless asked for fewer
LISTED = 1000  # runs one page lists, at most
WINDOW = 64  # summaries a page's first batch reads; doubled up to MAX_WINDOW
MAX_WINDOW = 1024
BUDGET = 5000  # summaries read at most for one page


@dataclass(frozen=True)
class ListedRun:
    """A run in a listing, and where its summary is in the runs bucket's stream (`seq`:
    the cursor of the pages below it)."""

    summary: store.RunSummary
    seq: int

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary.to_dict(), "seq": self.seq}


@dataclass(frozen=True)
class RunPage:
    """A page of runs, most recently changed first: `older` is the `before=` cursor of the
    next page (None: none); `scanned` counts the summaries read for it."""

    runs: list[ListedRun]
    older: int | None
    scanned: int

    def to_dict(self) -> dict[str, Any]:
        runs = [r.to_dict() for r in self.runs]
        return {"runs": runs, "older": self.older, "scanned": self.scanned}


def check_filters(state: str | None, name: str | None) -> None:
    """ConfigError for a state or workflow name that cannot be one (an earlier taskq's
    word for a state, `failed`, is taken as today's: `dead`)."""
    if state and LEGACY_RUN.get(state, state) not in store.STATES:
        raise ConfigError(f"a run's state is one of {', '.join(store.STATES)}, not {state!r}")
    if name:
        check_task(name)  # a workflow's decisions are a task of its name


async def runs_page(
    client: Client,
    state: str | None = None,
    name: str | None = None,
    *,
    limit: int = PAGE,
    before: int | None = None,
    budget: int = BUDGET,
) -> RunPage:
    """Up to `limit` runs (at most LISTED) in `state` of workflow `name` (None: any),
    most recently changed first, below sequence `before` (None: the newest), reading
    about `budget` summaries at most: batches backwards from the cursor, doubling."""
    check_filters(state, name)
    state = LEGACY_RUN.get(state, state) if state else state
    limit = max(1, min(limit, LISTED))
    try:
        await client.connection.kv.allow_direct_reads(client.names.runs_bucket)
        first, last = await client.connection.kv.span(client.names.runs_bucket)
    except NotFound:  # no bucket: no run was ever decided under this prefix
        return RunPage([], None, 0)
    low, high = max(first, 1), last + 1 if before is None else min(before, last + 1)
    found: list[ListedRun] = []
    scanned, window = 0, WINDOW
    while high > low and len(found) <= limit and scanned < budget:
        start = max(low, high - window)
        entries = await _window(client, start, high)
        scanned += len(entries)
        found += reversed([run for e in entries if (run := _listed(e, state, name))])
        high, window = start, min(window * 2, MAX_WINDOW)
    if len(found) > limit:
        return RunPage(found[:limit], found[limit - 1].seq, scanned)
    return RunPage(found, high if high > low else None, scanned)


async def _window(client: Client, start: int, end: int) -> list[KVEntry]:
    """The runs bucket's values with `start <= seq < end`, oldest first (a batch runs on
    past `end` where older revisions left gaps: what lies beyond is dropped)."""
    kv, bucket = client.connection.kv, client.names.runs_bucket
    found: list[KVEntry] = []
    seq = start
    while seq < end:
        got = await kv.window(bucket, seq, min(end - seq, MAX_WINDOW))
        found += [entry for entry in got if entry.revision < end]
        if not got or got[-1].revision >= end - 1:
            return found
        seq = got[-1].revision + 1
    return found


def _listed(entry: KVEntry, state: str | None, name: str | None) -> ListedRun | None:
    summary = None if entry.deleted else store.parse_summary(entry.value, any_kind=True)
    if summary is None or (state and summary.state != state) or (name and summary.name != name):
        return None
    return ListedRun(summary, entry.revision)


async def collect_runs(
    client: Client,
    state: str | None = None,
    name: str | None = None,
    limit: int = PAGE,
    before: int | None = None,
) -> tuple[list[ListedRun], int | None]:
    """Up to `limit` runs, page after page (each page's read is bounded; this reads on
    until it has them or the bucket's start), and the `before` cursor of what is older."""
    found: list[ListedRun] = []
    limit = max(1, min(limit, LISTED))
    while True:
        page = await runs_page(client, state, name, limit=limit - len(found), before=before)
        found += page.runs
        before = page.older
        if before is None or len(found) >= limit:
            return found, before


async def list_runs(
    client: Client,
    state: str | None = None,
    name: str | None = None,
    limit: int = PAGE,
    before: int | None = None,
) -> list[store.RunSummary]:
    """`collect_runs`' summaries, without the cursor."""
    return [run.summary for run in (await collect_runs(client, state, name, limit, before))[0]]
