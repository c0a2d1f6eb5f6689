"""Dead-letter pages read by sequence (taskq.dlq.pages): every record once, newest first,
whichever filters and cursors; and the dashboard's /dlq with 10,000 dead letters."""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime

import pytest

from taskq import App
from taskq.client import Client
from taskq.dlq.browse import Filters, list_dead
from taskq.dlq.pages import page
from taskq.dlq.record import DeadLetter, EnvelopeOriginal, ErrorInfo
from taskq.dlq.stream import ensure_dlq
from taskq.ids import new_id
from taskq.records.clock import format_time
from tests.dashboard.conftest import Dashboard

REASONS = ("exhausted", "permanent", "crashed")


def letter(n: int, failed_at: float) -> DeadLetter:
    """Dead letter number `n`: queue `q<n % 2>`, task `t<n % 3>`, reason by `n % 3`."""
    envelope = EnvelopeOriginal(id=new_id(), task=f"t{n % 3}", args=[n])
    error = ErrorInfo(
        type="ValueError", message=f"bad input {n}", traceback=f"Traceback...\nValueError: {n}"
    )
    return DeadLetter(
        message=envelope,
        reason=REASONS[n % 3],
        error=error,
        attempts=3,
        queue=f"q{n % 2}",
        original_seq=n,
        failed_at=format_time(datetime.fromtimestamp(failed_at, UTC)),
        worker="host:1",
    )


async def publish(app: App, count: int, now: float, every: float = 1.0) -> None:
    """`count` dead letters, the last failed at `now`, `every` seconds apart, pipelined."""
    client: Client = await app.client()
    await ensure_dlq(client)
    for start in range(0, count, 1000):
        acks = []
        for n in range(start, min(count, start + 1000)):
            record = letter(n, now - (count - 1 - n) * every)
            subject = client.names.dlq_subject(record.queue, record.task)
            acks.append(await client.connection.publish_nowait(subject, record.body(), {}))
        await asyncio.gather(*acks)


async def walk(app: App, filters: Filters, limit: int) -> list[int]:
    """Every page, oldest cursor after cursor: the sequences seen, in order."""
    seen: list[int] = []
    before = None
    while True:
        found = await page(app, filters, limit=limit, before=before)
        seen += [r.seq for r in found.records]
        if found.older is None:
            return seen
        before = found.older


async def test_pages_show_every_record_once_newest_first(app: App) -> None:
    now = time.time()
    # 10 s apart: a time window's edges sit 5 s from any record, so the seconds between
    # the two reads compared below cannot move a record across an edge on a busy machine
    # (the window is shifted by the time the earlier reads took: under the suite's load
    # they took over 5 s and moved record 200 out between `expected` and the walk)
    await publish(app, 300, now, every=10.0)
    everything = [r.seq for r in await list_dead(app, newest_first=True)]
    assert await walk(app, Filters(), 50) == everything
    for filters in (
        Filters(queue="q1"),
        Filters(task="t2"),
        Filters(reason="crashed"),
        Filters(text="BAD INPUT 1"),  # case-insensitive, in the message
        Filters(since=1005, until=205),  # failed between ~1,000 s and ~200 s ago
        Filters(queue="q0", reason="permanent", text="valueerror: 1"),
    ):
        if filters.since is not None:  # "ago" counts from now: the reads above took time
            drift = time.time() - now
            filters = Filters(since=filters.since + drift, until=(filters.until or 0) + drift)
        expected = [r.seq for r in await list_dead(app, filters, newest_first=True)]
        assert expected, filters
        assert await walk(app, filters, 7) == expected, filters
    first = await page(app, Filters(queue="q1"), limit=10)
    assert first.total == 150 and first.newer is None  # the server counts subject filters
    assert (await page(app, Filters(reason="crashed"), limit=10)).total is None
    # `after` pages newer: back from the second page to the first
    first = await page(app, Filters(), limit=10)
    second = await page(app, Filters(), limit=10, before=first.older)
    back = await page(app, Filters(), limit=10, after=second.records[0].seq)
    assert [r.seq for r in back.records] == [r.seq for r in first.records]
    assert back.newer is None and back.older == first.records[-1].seq


async def test_a_page_reads_a_bounded_number_of_records(app: App) -> None:
    await publish(app, 3000, time.time())
    found = await page(app, Filters(text="no such text"), limit=50, budget=1000)
    assert found.records == [] and 1000 <= found.scanned < 1000 + 1024
    assert found.older is not None  # where to go on looking
    rest = await page(app, Filters(text="no such text"), limit=50, before=found.older)
    assert rest.scanned <= 3000 - found.scanned + 1024


@pytest.mark.heavy
async def test_the_dlq_page_with_10000_dead_letters(app: App, dashboard: Dashboard) -> None:
    """Every page and filter answers with 10,000 dead letters; how fast is printed (the
    figures of docs/dashboard.md), not bounded: a busy machine makes any bound a flake."""
    await publish(app, 10_000, time.time(), every=0.5)
    timings = {}
    for name, path in (
        ("first page", "/dlq"),
        ("first page, JSON", "/api/dlq"),
        ("queue filter", "/dlq?queue=q1"),
        ("reason filter", "/dlq?reason=crashed"),
        ("text filter", "/dlq?q=bad+input+9999"),
        ("time range", "/dlq?since=2h&until=1h"),
        ("deep page", "/dlq?before=2000"),
    ):
        timings[name] = await _median_seconds(dashboard, path)
    report = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in timings.items())
    print(f"\n/dlq with 10,000 dead letters (median of 3): {report}")
    first = await dashboard.http.api("/dlq")
    assert first["total"] == 10_000 and len(first["records"]) == 50
    assert [r["seq"] for r in first["records"]] == list(range(10_000, 9_950, -1))
    # the bulk actions' confirmation counts every matching record: a read of the stream
    started = time.perf_counter()
    ask = await dashboard.http.post("/api/dlq/purge", {"reason": "crashed"})
    counted = time.perf_counter() - started
    assert ask.status == 409 and ask.json()["count"] == 3333
    started = time.perf_counter()
    lines = (await dashboard.http.get("/dlq/export")).body.splitlines()
    exported = time.perf_counter() - started
    assert len(lines) == 10_000
    print(
        f"counting 3,333 of them to confirm a purge {counted * 1000:.0f} ms, "
        f"exporting all 10,000 {exported * 1000:.0f} ms"
    )


async def _median_seconds(dashboard: Dashboard, path: str) -> float:
    took = []
    for _ in range(3):
        started = time.perf_counter()
        reply = await dashboard.http.get(path)
        took.append(time.perf_counter() - started)
        assert reply.status == 200, (path, reply.body[:300])
    return statistics.median(took)


async def test_the_page_of_dead_letter_0_is_a_404(dashboard: Dashboard) -> None:
    """Issue 39 (10): sequence 0 is no dead letter (the server answers it a bad request)."""
    assert (await dashboard.http.get("/dlq/0")).status == 404
