"""Recent tasks over several results buckets (`results_partitions` > 1, or the buckets an
earlier layout left): pages merge the buckets newest first by stored time, with cursors
that are times (microseconds), each task listed once however the pages are walked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from taskq import App
from taskq.client import Client
from taskq.errors import TaskFailed
from taskq.operate.task_list import ListedTask, TaskFilters, TaskPage, _down, _Reach, _up, recent
from taskq.operate.task_scan import micros
from taskq.records.results import encoded, ensure_results
from tests.conftest import running_worker
from tests.stored import write_records


@pytest.fixture
async def spread(nats_url: str, prefix: str) -> AsyncIterator[App]:
    application = App(url=nats_url, prefix=prefix, results_partitions=4)
    yield application
    await application.aclose()


async def walk(app: App, filters: TaskFilters, limit: int, budget: int = 5000) -> list[str]:
    """Every page, older cursor after older cursor: the ids seen, in order."""
    seen: list[str] = []
    before = None
    while True:
        found = await recent(app, filters, limit=limit, before=before, budget=budget)
        assert len(found.tasks) <= limit
        stored = [t.stored for t in found.tasks]
        assert stored == sorted(stored, reverse=True)  # newest first
        seen += [t.id for t in found.tasks]
        if found.older is None:
            return seen
        assert before is None or found.older < before  # each page steps down
        before = found.older


async def truth(client: Client) -> list[tuple[int, int, str]]:
    """Every key's current record in every results bucket, newest first by stored time
    (read the slow way): (stored µs, sequence, key)."""
    kv, latest = client.connection.kv, []
    for bucket in await client.results.existing():
        await kv.allow_direct_reads(bucket)
        entries = await kv.window(bucket, 1, 1024)
        current = await kv.latest(bucket, [e.key for e in entries])
        latest += [
            (micros(e.created), e.revision, e.key) for e in entries if current[e.key] == e.revision
        ]
    return sorted(latest, reverse=True)


async def test_pages_merge_the_partitions_newest_first(spread: App) -> None:
    @spread.task(name="double", queue="maths")
    async def double(n: int) -> int:
        return 2 * n

    @spread.task(name="boom", max_retries=0)
    async def boom(n: int) -> None:
        raise ValueError(f"boom {n}")

    ids: list[str] = []  # settled one after another: in this order
    async with running_worker(spread):
        for n in range(30):
            if n % 5 == 4:
                handle = await boom.enqueue(n)
                with pytest.raises(TaskFailed):
                    await handle.result(timeout=10)
            else:
                handle = await double.enqueue(n)
                assert await handle.result(timeout=10) == 2 * n
            ids.append(handle.id)
    client = await spread.client()
    holding = [
        bucket for bucket in client.results.configured if await client.connection.kv.entries(bucket)
    ]
    assert len(holding) > 1 and all(
        b.startswith(client.names.results_bucket + "_P") for b in holding
    )
    newest = ids[::-1]

    first = await recent(spread, limit=10)
    assert [t.id for t in first.tasks] == newest[:10] and first.newer is None
    assert first.older is not None and first.older > 10**15  # a time in µs, not a sequence
    pages = [first]
    while pages[-1].older is not None:
        pages.append(await recent(spread, limit=10, before=pages[-1].older))
    assert [t.id for page in pages for t in page.tasks] == newest  # all 30, each once
    assert [len(page.tasks) for page in pages] == [10, 10, 10]
    # `after` pages newer: from the third page back to the second, from the second to the first
    for later, earlier in ((pages[2], pages[1]), (pages[1], pages[0])):
        assert later.newer is not None
        back = await recent(spread, limit=10, after=later.newer)
        assert [t.id for t in back.tasks] == [t.id for t in earlier.tasks]
        assert back.older == later.newer
    assert (await recent(spread, limit=10, after=pages[1].newer)).newer is None  # the top

    dead = [i for n, i in enumerate(ids) if n % 5 == 4][::-1]
    assert await walk(spread, TaskFilters(state="dead"), 4) == dead
    assert await walk(spread, TaskFilters(name="boom"), 100) == dead
    assert await walk(spread, TaskFilters(name="double", queue="maths"), 7) == [
        i for i in newest if i not in dead
    ]
    assert await walk(spread, TaskFilters(id_prefix=ids[7][:26]), 3) == [ids[7]]
    page = await recent(spread, TaskFilters(state="dead"), limit=2)
    assert [(t.id, t.task, t.state) for t in page.tasks] == [(i, "boom", "dead") for i in dead[:2]]
    assert page.tasks[0].error == {"type": "ValueError", "message": "boom 29"}


async def write_spread(app: App, count: int, start: int = 0) -> list[str]:
    """`count` records pipelined into their partitions (stored close together: records of
    one microsecond in different buckets are likely), ids `id<n:06d>` from `start`, task
    `t<n % 3>`."""
    client = await app.client()
    await ensure_results(client)
    ids, acks = [], []
    for n in range(start, start + count):
        key, body = f"id{n:06d}", encoded({"state": "succeeded", "task": f"t{n % 3}"})
        ids.append(key)
        acks.append(await client.connection.kv.put_nowait(client.results.of(key), key, body))
    await asyncio.gather(*acks)
    return ids


async def test_each_record_once_with_small_budgets_and_records_stored_together(
    spread: App,
) -> None:
    await write_spread(spread, 600)  # 150 or so a bucket: more than a first window
    client = await spread.client()
    expected = [key for _, _, key in await truth(client)]
    assert sorted(expected) == [f"id{n:06d}" for n in range(600)]
    assert await walk(spread, TaskFilters(), 23) == expected
    # a budget of 100 over 4 buckets: each bucket stops after a window, pages end there
    assert await walk(spread, TaskFilters(), 50, budget=100) == expected
    t1 = [key for key in expected if int(key[2:]) % 3 == 1]
    assert await walk(spread, TaskFilters(name="t1"), 9, budget=100) == t1
    nothing = await recent(spread, TaskFilters(name="nothing.like.it"), budget=100)
    assert nothing.tasks == [] and nothing.older is not None  # where to go on looking
    assert nothing.scanned < 100 + 4 * 1024


async def test_records_an_earlier_layout_left_are_listed_too(
    spread: App, nats_url: str, prefix: str
) -> None:
    earlier = App(url=nats_url, prefix=prefix)  # the default layout: one bucket
    try:
        old = await write_records(earlier, 12)
    finally:
        await earlier.aclose()
    new = await write_spread(spread, 8, start=100)
    client = await spread.client()
    buckets = await client.results.existing()
    assert buckets[-1] == client.names.results_bucket and len(buckets) == 5
    listed = await walk(spread, TaskFilters(), 5)
    assert listed == [key for _, _, key in await truth(client)]
    # the old ones, written into one stream, in order; the new ones across four, in any
    assert listed[8:] == old[::-1] and sorted(listed[:8]) == new
    page: TaskPage = await recent(spread, limit=50)
    assert [t.id for t in page.tasks] == listed and page.older is None


def listed(stored: int, seq: int, key: str) -> ListedTask:
    return ListedTask(key, "t", "q", "succeeded", 1, "", None, "", "", None, seq, stored)


def test_a_page_by_time_ends_at_a_microsecond_boundary() -> None:
    """Records stored in one microsecond (in one bucket or several) are kept on one page:
    it ends above the microsecond of the task past the limit, or of the oldest record read
    in a bucket not read to its start; only more than a page in one microsecond is cut."""
    a = [listed(105, 9, "a1"), listed(103, 8, "a2"), listed(103, 7, "a3")]
    b = [listed(104, 5, "b1"), listed(103, 4, "b2"), listed(101, 3, "b3")]
    shown, bottom = _down([_Reach(a, None), _Reach(b, None)], 3, None)
    assert [t.id for t in shown] == ["a1", "b1"] and bottom == 104
    shown, bottom = _down([_Reach(a[1:], None), _Reach(b[1:], None)], 3, 104)
    assert [t.id for t in shown] == ["a2", "a3", "b2"] and bottom == 102
    shown, bottom = _down([_Reach(a, 103), _Reach(b, None)], 10, None)  # a: more below
    assert [t.id for t in shown] == ["a1", "b1"] and bottom == 104
    shown, bottom = _down([_Reach(a, None), _Reach(b, None)], 10, None)
    assert [t.id for t in shown] == ["a1", "b1", "a2", "a3", "b2", "b3"] and bottom is None
    same = [listed(200, seq, f"s{seq}") for seq in range(4, 0, -1)]
    shown, bottom = _down([_Reach(same, None)], 3, None)
    assert shown == [] and bottom == 201  # ...then the page below steps down anyway
    shown, bottom = _down([_Reach(same, None)], 3, 201)
    assert [t.id for t in shown] == ["s4", "s3", "s2"] and bottom == 200
    # going up: the oldest first, shown newest first
    c = [listed(102, 2, "c2"), listed(101, 1, "c1")]
    d = [listed(103, 2, "d2"), listed(101, 1, "d1")]
    shown, top = _up([_Reach(c, None), _Reach(d, None)], 2, 100)
    assert [t.id for t in shown] == ["d1", "c1"] and top == 102
    shown, top = _up([_Reach(c, None), _Reach(d, 103)], 3, 100)  # d: more above 103
    assert [t.id for t in shown] == ["c2", "d1", "c1"] and top == 103
    shown, top = _up([_Reach(same[::-1], None)], 3, 200)
    assert [t.id for t in shown] == ["s3", "s2", "s1"] and top == 201
