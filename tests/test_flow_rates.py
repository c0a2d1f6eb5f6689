"""Rate limits across worker processes, globally and per key (docs/flow-control.md)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from taskq import App, ConfigError
from tests.apps import flowctl
from tests.conftest import WorkerProcess, running_worker
from tests.flow_helpers import events, flow_app, start_workers

__all__ = ["flow_app"]  # the fixture, shared


async def test_a_rate_limit_holds_across_worker_processes_without_spending_attempts(
    flow_app: App, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    ledger = tmp_path / "ledger"
    # Given 3 worker processes and 200 tasks limited to 20/s (10 s of work at the limit)
    await start_workers(worker_process, ledger, 3)
    handles = await flowctl.rated.enqueue_many([[str(i)] for i in range(200)])
    for handle in handles:
        await handle.result(timeout=60)
    starts = sorted((at, attempt) for event, _, at, attempt, _ in events(ledger))
    assert len(starts) == 200
    # Then every task ran once, on attempt 1 (held tasks spent none)
    assert {attempt for _, attempt in starts} == {1}
    # at 20/s ± 15%: over the seconds the run took (its windows are whole seconds), and in
    # every second but the first and last (which the run may fill only in part)
    per_second = Counter(int(at) for at, _ in starts)
    seconds = range(min(per_second), max(per_second) + 1)
    assert 20 * 0.85 <= len(starts) / len(seconds) <= 20 * 1.15, per_second
    assert all(17 <= per_second[s] <= 23 for s in seconds[1:-1]), per_second
    assert max(per_second.values()) <= 23, per_second


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
        mine = sorted(at for who, at in starts if who == customer)
        per_second = Counter(int(at) for at in mine)
        assert max(per_second.values()) <= 5 and len(per_second) >= 2  # 10 at 5/s
    # both keys ran in the first window: one key's backlog does not hold up the other
    # (held behind a's 10, b would start only after them)
    assert {who for who, _ in sorted(starts, key=lambda s: s[1])[:6]} == {"a", "b"}


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
