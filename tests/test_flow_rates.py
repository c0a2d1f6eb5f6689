"""Rate limits across worker processes, globally and per key (docs/flow-control.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq import App, ConfigError
from taskq.clock import Clock
from taskq.flowcontrol.options import Rate
from taskq.flowcontrol.rates import RateWindows, Verdict, _fits, earliest
from taskq.flowcontrol.start_gate import StartGate
from tests.apps import flowctl
from tests.conftest import WorkerProcess, running_worker
from tests.examples import examples
from tests.faults import LOSE_ACK, inject
from tests.flow_helpers import events, flow_app, start_workers

__all__ = ["flow_app"]  # the fixture, shared


@pytest.mark.heavy
async def test_a_rate_limit_holds_across_worker_processes_without_spending_attempts(
    flow_app: App, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    ledger = tmp_path / "ledger"
    # Given 3 worker processes and 100 tasks limited to 20/s (5 s of work at the limit)
    await start_workers(worker_process, ledger, 3)
    handles = await flowctl.rated.enqueue_many([[str(i)] for i in range(100)])
    for handle in handles:
        await handle.result(timeout=60)
    starts = sorted((at, attempt) for event, _, at, attempt, _ in events(ledger))
    assert len(starts) == 100
    # Then every task ran once, on attempt 1 (held tasks spent none)
    assert {attempt for _, attempt in starts} == {1}
    # and never more than 20 within any second, sliding (half a second is left for the
    # jitter of starting what was admitted; clock-aligned windows would let 40 start
    # around a window's edge). How close to 20/s it runs is bench/flow.py's figure.
    assert busiest([at for at, _ in starts], 0.5) <= 20


async def test_a_rate_limit_per_key_counts_each_key_on_its_own(app: App) -> None:
    starts: list[tuple[str, float]] = []

    @app.task(rate_limit="5/s", rate_limit_key="customer")
    async def notify(customer: str, n: int) -> None:
        starts.append((customer, time.time()))

    async with running_worker(app, concurrency=8):
        handles = [await notify.enqueue(c, n) for n in range(10) for c in ("a", "b")]
        for handle in handles:
            await handle.result(timeout=20)
    for customer in ("a", "b"):
        mine = [at for who, at in starts if who == customer]
        assert len(mine) == 10 and busiest(mine, 0.5) <= 5  # never 6 within a second
    # both keys ran in the first window: one key's backlog does not hold up the other
    # (held behind a's 10, b would start only after them)
    assert {who for who, _ in sorted(starts, key=lambda s: s[1])[:6]} == {"a", "b"}


def busiest(starts: list[float], slack: float) -> int:
    """The most starts within any window of 1 - `slack` seconds."""
    ordered = sorted(starts)
    return max(
        sum(1 for later in ordered[i:] if later - at < 1.0 - slack) for i, at in enumerate(ordered)
    )


async def test_rate_options_are_checked(app: App) -> None:
    for bad in (
        {"rate_limit": "fast"},
        {"rate_limit": "0/s"},
        {"rate_limit": "5/d"},
        {"rate_limit_key": "n"},  # without rate_limit
        {"rate_limit": "5/s", "rate_limit_key": "nope"},
    ):
        with pytest.raises(ConfigError):

            @app.task(name=f"bad{len(app.tasks)}", **bad)
            async def bad_task(n: int) -> None: ...


@settings(max_examples=examples(300), deadline=None)
@given(
    st.integers(1, 8),
    st.integers(50, 2000),
    st.lists(st.integers(0, 3000), min_size=1, max_size=40),
)
def test_earliest_keeps_every_sliding_window_within_the_limit(
    limit: int, window: int, arrivals: list[int]
) -> None:
    """Planned starts, one per arrival at its time (ms), in arrival order: never more than
    `limit` within any `window`, and each the earliest start that allows it."""
    planned: list[int] = []
    for now in sorted(arrivals):
        start = earliest(sorted(planned), now, limit, window)
        assert start >= now
        for earlier in range(now, start, max(1, (start - now) // 20)):
            assert not _fits(sorted(planned), earlier, limit, window)
        planned.append(start)
    ordered = sorted(planned)
    assert all(ordered[i + limit] - ordered[i] >= window for i in range(len(ordered) - limit))


async def test_a_rate_window_whose_write_ack_was_lost_spends_one_start(app: App) -> None:
    """A loaded server stores a reservation but its ack never comes: the retry loses the
    compare-and-set to that very write. The task must not reserve a second start: with
    `2/h`, both tasks still run now, none is held for an hour. (A start that slips on a
    busy machine gives its reservation back: it spends none either.)"""
    ran: list[int] = []

    @app.task(rate_limit="2/h")
    async def notify(n: int) -> None:
        ran.append(n)

    client = await app.client()
    async with running_worker(app, concurrency=1) as worker:
        with inject(client.connection) as faults:
            faults.lose_ack(f"*.limit.rate.*.{notify.name}")
            await (await notify.enqueue(1)).result(timeout=30)
        assert LOSE_ACK in [c.fault for c in faults.calls]
        await (await notify.enqueue(2)).result(timeout=30)
    assert ran == [1, 2] and worker.stats["succeeded"] == 2 and worker.stats["held"] == 0


async def test_a_long_window_start_tolerates_a_loaded_workers_lag(app: App) -> None:
    """Under `1/h` a start that slipped gives its reservation back and queues behind the one
    reserved after it: an hour lost (a fresh-clone run's `1/h` task held for two while the
    other waited one). So a long window's slack is seconds (2.5 s of lag for `/h`): the
    first of two tasks whose body comes 1 s late still starts at its reservation."""
    windows = RateWindows(await app.client(), "notify", "-", Rate.parse("1/h", "notify"))
    first, second = await windows.admit(None), await windows.admit(None)
    assert first.start is not None and second.start is None  # the second: an hour on
    lagging = Clock()
    lagging.skip_to(first.start + 1.0)  # the body's last check comes 1 s after its start

    async def readmit(ticket: str) -> Verdict:
        return await windows.admit(None, slipped_from=ticket)

    loop = asyncio.get_running_loop()
    gate = StartGate(first.start, windows.slack, readmit, loop, "-", lagging, first.ticket)
    await gate.passed()  # a slip would re-admit it behind the second: StartSlipped
    assert gate.slipped == 0 and gate.ticket == first.ticket and await windows.in_use() == 1


async def test_a_slipped_start_gives_its_reservation_back(app: App) -> None:
    """A start that slipped never had a body start at it: asking for a fresh one takes it
    off the record in the same write. With `1/h`, the fresh start is now, not an hour on,
    and the record plans one start."""
    windows = RateWindows(await app.client(), "notify", "-", Rate.parse("1/h", "notify"))
    first = await windows.admit(None)
    assert first.start is not None and first.ticket  # now, with its reservation
    fresh = await windows.admit(None, slipped_from=first.ticket)
    assert fresh.start is not None and fresh.start - time.time() < 1.0
    assert fresh.ticket != first.ticket and await windows.in_use() == 1
    # without giving one back, the next start is an hour on (held with a ticket)
    later = await windows.admit(None)
    assert later.start is None and later.until > time.time() + 3000
