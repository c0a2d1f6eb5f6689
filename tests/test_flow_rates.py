"""Rate limits across worker processes, globally and per key (docs/flow-control.md)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq import App, ConfigError
from taskq.flowcontrol.rates import _fits, earliest
from tests.apps import flowctl
from tests.conftest import WorkerProcess, running_worker, wait_until
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


@settings(max_examples=300, deadline=None)
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
    `2/h`, both tasks still run now, none is held for an hour. A start that slips on a
    busy machine also spends a second reservation (by design: the start gate), so the
    scenario gets up to three tries, each its own window (key); the lost ack alone fails
    every one."""
    ran: list[tuple[str, int]] = []

    @app.task(rate_limit="2/h", rate_limit_key="window")
    async def notify(window: str, n: int) -> None:
        ran.append((window, n))

    client = await app.client()
    async with running_worker(app, concurrency=1) as worker:
        for attempt in "abc":
            with inject(client.connection) as faults:
                faults.lose_ack(f"*.limit.rate.{attempt}.{notify.name}")
                await (await notify.enqueue(attempt, 1)).result(timeout=30)
                await notify.enqueue(attempt, 2)
                with contextlib.suppress(AssertionError):
                    await wait_until(lambda a=attempt: (a, 2) in ran, timeout=20)
            assert LOSE_ACK in [c.fault for c in faults.calls]
            if (attempt, 2) in ran:
                break
    assert (attempt, 2) in ran, f"the second task of each window was held: {ran}"
    assert worker.stats["succeeded"] == len(ran)
