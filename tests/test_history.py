"""The history (issue 44): workers add what they settled to windows kept by the server, per
queue, per task name and for all queues; `taskq history` and `history()` read them back. On
a real server with real workers: exact counts by verdict, run-time percentiles, two workers
counting into one record, the last counts flushed when a worker stops, hostile records
skipped, a bounded number of series per worker."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from taskq import App
from taskq.errors import BrokerError, ConfigError
from taskq.operate.history import history
from taskq.records.history import BINS, FINE, MAX_RECORD, Window, bin_middle, bin_of, decode
from taskq.timings import Timings
from taskq.workers.history import NAMES, HistoryFeed
from tests.conftest import cli, running_worker, wait_until


def totals(windows: list[Window]) -> Window:
    total = Window(0, 0)
    for window in windows:
        total.add(window)
    return total


def counts(window: Window) -> tuple[int, int, int]:
    return window.succeeded, window.failed, window.retried


def mixed(app: App) -> dict[str, Any]:
    """Tasks that succeed (fast and slow), retry once then succeed, and die."""
    tried: dict[int, int] = {}

    @app.task
    async def fast(n: int) -> int:
        return n

    @app.task
    async def slow(n: int) -> int:
        await asyncio.sleep(0.2)
        return n

    @app.task(max_retries=2, backoff=0.05, jitter=0)
    async def flaky(n: int) -> int:
        tried[n] = tried.get(n, 0) + 1
        if tried[n] == 1:
            raise ConnectionError("first attempt fails")
        return n

    @app.task(max_retries=1, backoff=0.05, jitter=0)
    async def doomed(n: int) -> None:
        raise ValueError("never")

    return {"fast": fast, "slow": slow, "flaky": flaky, "doomed": doomed}


async def settled_in_history(app: App, task: str, expected: tuple[int, int, int]) -> Window:
    client = await app.client()
    found: list[Window] = []

    async def there() -> bool:
        found[:] = [totals(await history(client, task=task))]
        return counts(found[0]) == expected

    await wait_until(there, timeout=30)
    return found[0]


async def test_counts_and_run_times_by_task_queue_and_all(app: App, nats_url: str) -> None:
    tasks = mixed(app)
    async with running_worker(app, concurrency=8):
        for n in range(20):
            await tasks["fast"].enqueue(n)
        for n in range(4):
            await tasks["slow"].enqueue(n)
            await tasks["flaky"].enqueue(n)
        for n in range(3):
            await tasks["doomed"].enqueue(n)
        fast = await settled_in_history(app, "fast", (20, 0, 0))
        slow = await settled_in_history(app, "slow", (4, 0, 0))
        await settled_in_history(app, "flaky", (4, 0, 4))
        doomed = await settled_in_history(app, "doomed", (0, 3, 3))
    client = await app.client()
    # the queue's and every queue's series count the same tasks
    assert counts(totals(await history(client, queue="default"))) == (28, 3, 7)
    assert counts(totals(await history(client))) == (28, 3, 7)
    # run times: every attempt that ran, within a bin of what it took
    assert sum(slow.bins.values()) == 4 and sum(doomed.bins.values()) == 6
    assert (slow.percentile(0.5) or 0) >= 0.2 / 1.1
    assert (fast.percentile(0.99) or 1) < (slow.percentile(0.5) or 0)
    # the day's coarser windows hold the same counts
    assert counts(totals(await history(client, task="fast", span="24h"))) == (20, 0, 0)
    # the CLI: the same windows as JSON, and a table with the span's totals
    listed = json.loads(
        (await cli(nats_url, app.settings.prefix, "history", "--task", "slow", "--json")).stdout
    )
    assert len(listed) == 361 and sum(w["succeeded"] for w in listed) == 4
    busy = [w for w in listed if w["succeeded"]]
    assert all(w["runtime_p50"] >= 0.18 and w["seconds"] == FINE for w in busy)
    table = (await cli(nats_url, app.settings.prefix, "history", "-q", "default")).stdout
    assert "total: 28 succeeded, 3 failed, 7 retried" in table


async def test_two_workers_count_into_the_same_windows(nats_url: str, prefix: str) -> None:
    """Both workers merge into one record per window by compare-and-set: no count is lost
    to the other's write (a blind put would keep only the last writer's)."""
    apps = [App(url=nats_url, prefix=prefix, timings=Timings.short()) for _ in range(2)]
    for app in apps:

        @app.task
        async def tick(n: int) -> int:
            await asyncio.sleep(0.002)
            return n

    try:
        async with running_worker(apps[0], concurrency=4), running_worker(apps[1], concurrency=4):
            for n in range(300):
                await apps[0].tasks["tick"].enqueue(n)
            window = await settled_in_history(apps[0], "tick", (300, 0, 0))
        assert sum(window.bins.values()) == 300
    finally:
        for app in apps:
            await app.aclose()


async def test_a_stopping_worker_flushes_what_it_settled_last(nats_url: str, prefix: str) -> None:
    """With flushes an hour apart, only the flush at stop can have stored the counts."""
    app = App(
        url=nats_url,
        prefix=prefix,
        timings=Timings.short().model_copy(update={"history_every": 3600.0}),
    )

    @app.task
    async def once(n: int) -> int:
        return n

    try:
        async with running_worker(app) as worker:
            for n in range(5):
                await once.enqueue(n)
            await wait_until(lambda: worker.stats["succeeded"] == 5)
            client = await app.client()
            assert counts(totals(await history(client, task="once"))) == (0, 0, 0)
        assert counts(totals(await history(client, task="once"))) == (5, 0, 0)
    finally:
        await app.aclose()


async def test_hostile_records_are_skipped_and_replaced(app: App) -> None:
    """A worker-role member may write anything on the history's subjects: what does not
    decode as a window (too big, not JSON, out-of-range counts or bins, another length) is
    left out of every read, and the next flush into that window replaces it."""
    tasks = mixed(app)
    client = await app.client()
    async with running_worker(app):
        await tasks["fast"].enqueue(1)
        await settled_in_history(app, "fast", (1, 0, 0))
    records, names = client.connection.records, app.names
    index = int(time.time() // FINE)
    with pytest.raises(BrokerError):  # the stream refuses a window over its size
        await records.put(names.history_subject("f", "t.fast", index - 99), b"x" * (MAX_RECORD + 1))
    assert decode(b"[" * (MAX_RECORD + 1), FINE) is None
    bad = [
        b"not json",
        json.dumps({"start": index * FINE, "len": FINE, "s": -5, "f": 0, "r": 0, "b": []}).encode(),
        json.dumps(
            {"start": index * FINE, "len": FINE, "s": 1, "f": 0, "r": 0, "b": [[BINS, 1]]}
        ).encode(),
        json.dumps(
            {"start": index * FINE, "len": 300, "s": 10**6, "f": 0, "r": 0, "b": []}
        ).encode(),
        json.dumps(
            {"start": index * FINE, "len": FINE, "s": 2**60, "f": 0, "r": 0, "b": []}
        ).encode(),
        json.dumps(
            {"start": index * FINE + 1, "len": FINE, "s": 7, "f": 0, "r": 0, "b": []}
        ).encode(),
    ]
    assert all(decode(body, FINE) is None for body in bad)
    for offset, body in enumerate(bad):
        subject = names.history_subject("f", "t.fast", index - 100 - offset)
        await records.put(subject, body, ttl=3600)
    assert counts(totals(await history(client, task="fast"))) == (1, 0, 0)
    # a flush into a window holding garbage replaces it with its own counts
    garbage = names.history_subject("f", "t.fast", index + 1)
    await records.put(garbage, b"{", ttl=3600)
    feed = HistoryFeed(client)
    feed.pending[("default", "fast", "s")].append(0.01)
    feed._fold((index + 1) * FINE + 1)
    await feed.flush()
    stored = await client.connection.messages.last(names.history_stream, garbage)
    assert stored is not None and decode(stored.data, FINE) is not None
    assert counts(decode(stored.data, FINE) or Window(0, 0)) == (1, 0, 0)


async def test_history_records_expire_and_the_stream_is_bounded(app: App, nats_url: str) -> None:
    tasks = mixed(app)
    async with running_worker(app):
        await tasks["fast"].enqueue(1)
        await settled_in_history(app, "fast", (1, 0, 0))
    client = await app.client()
    names = app.names
    index = int(time.time() // FINE)
    subject = names.history_subject("f", "t.fast", index)
    stored = await client.connection.messages.last(names.history_stream, subject)
    if stored is None:  # settled at the very end of the previous window
        subject = names.history_subject("f", "t.fast", index - 1)
        stored = await client.connection.messages.last(names.history_stream, subject)
    assert stored is not None and stored.headers.get("Nats-TTL") == f"{3600 + FINE}s"
    import nats

    nc = await nats.connect(nats_url)
    try:
        config = (await nc.jetstream().stream_info(names.history_stream)).config
    finally:
        await nc.close()
    assert config.max_msgs == app.settings.history_max_windows and config.max_bytes == -1
    assert config.max_msg_size == MAX_RECORD
    assert config.max_msgs_per_subject == 1 and config.allow_msg_ttl


def test_a_worker_keeps_a_bounded_number_of_task_series(app: App) -> None:
    """A flood of task names adds series up to NAMES; the rest count in their queue's and
    every queue's series only."""
    feed = HistoryFeed.__new__(HistoryFeed)
    HistoryFeed.__init__(feed, _NamesOnly(app))  # type: ignore[arg-type]
    for n in range(NAMES + 50):
        feed.pending[("default", f"t{n}", "s")].append(0.001)
    feed._fold(time.time())
    series = {s.split(".", 4)[-1] for s in feed._unsent}
    assert len([s for s in series if s.startswith("t.")]) == NAMES
    queue = [w for s, w in feed._unsent.items() if s.endswith(".q.default")]
    assert {w.succeeded for w in queue} == {NAMES + 50}


class _NamesOnly:
    """What `HistoryFeed` reads of a client before it flushes: its names and settings."""

    def __init__(self, app: App) -> None:
        self.names = app.names
        self.settings = app.settings


def test_bins_cover_microseconds_to_a_day_within_ten_percent() -> None:
    for seconds in (0.0002, 0.0015, 0.02, 0.7, 3.0, 61.0, 3600.0, 80000.0):
        middle = bin_middle(bin_of(seconds))
        assert abs(middle - seconds) / seconds < 0.1, seconds
    assert bin_of(float("nan")) == 0 and bin_of(-1) == 0 and bin_of(10**9) == BINS - 1


@pytest.mark.parametrize(
    "args",
    [("--queue", "a", "--task", "b"), ("--queue", "a.b"), ("--task", "x..y"), ("--span", "2h")],
)
async def test_bad_history_arguments_are_one_line_and_exit_2(
    nats_url: str, prefix: str, args: tuple[str, ...]
) -> None:
    done = await cli(nats_url, prefix, "history", *args)
    assert done.returncode == 2, done
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


async def test_a_query_names_a_queue_or_a_task(app: App) -> None:
    client = await app.client()
    with pytest.raises(ConfigError):
        await history(client, queue="a", task="b")
    with pytest.raises(ConfigError):
        await history(client, span="7d")
    # nothing settled yet, no stream yet: an hour of empty windows
    windows = await history(client, queue="nothing")
    assert len(windows) == 361 and counts(totals(windows)) == (0, 0, 0)
