"""Global and per-key concurrency limits across worker processes (docs/flow-control.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from taskq import App, ConfigError, TaskCancelled
from taskq.flowcontrol.held import SPENT
from taskq.records.envelope import Envelope
from taskq.workers.settle import Settler
from tests.apps import flowctl
from tests.conftest import WorkerProcess, running_worker, wait_until
from tests.flow_helpers import events, flow_app, most_at_once, start_workers

__all__ = ["flow_app"]  # a fixture


async def test_max_concurrency_holds_across_three_worker_processes(
    flow_app: App, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    ledger = tmp_path / "ledger"
    # Given 3 worker processes with 8 slots each, and 36 tasks limited to 3 at once
    await start_workers(worker_process, ledger, 3)
    handles = await flowctl.limited.enqueue_many([[str(i), 0.25] for i in range(36)])
    for handle in handles:
        await handle.result(timeout=60)
    rows = events(ledger)
    # Then never more than 3 ran at once (sampled from every run's start and end), the
    # limit was used (3 at once), every task ran once on attempt 1, across processes
    assert most_at_once(rows) == 3
    starts = [r for r in rows if r[0] == "start"]
    assert len(starts) == 36 and {r[3] for r in starts} == {1}
    assert len({r[4] for r in starts}) >= 2


async def test_per_key_limit_is_kept_and_a_busy_key_does_not_hold_up_another(
    flow_app: App, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    ledger = tmp_path / "ledger"
    duration = 0.5
    # Given tenant a with 1,000 queued tasks (2 at a time) and then one task of tenant b
    await flowctl.per_tenant.enqueue_many([["a", str(i), duration] for i in range(1000)])
    b = await flowctl.per_tenant.enqueue("b", "only", duration)
    await start_workers(worker_process, ledger, 3)
    await b.result(timeout=60)
    rows = events(ledger)
    b_start = next(at for event, token, at, _, _ in rows if token == "b:only" and event == "start")

    def a_after() -> int:  # a's tasks started after b's
        return sum(1 for e, t, at, _, _ in events(ledger) if e == "start" and at > b_start)

    # a few more of a's tasks run meanwhile: the limit is watched beyond b's run
    await wait_until(lambda: a_after() >= 4, timeout=30)
    rows = events(ledger)
    a_before = [at for event, token, at, _, _ in rows if event == "start" and at < b_start]
    # Then b's task started while a's backlog was still there: it waited only for a's
    # tasks to be parked, never for a's slots (behind a's 1,000 it would be the last).
    # How soon is a figure, not a bound: on a busy machine parking takes longer.
    assert len(a_before) < 100, len(a_before)
    assert most_at_once(rows, "a:") == 2
    assert {attempt for event, _, _, attempt, _ in rows if event == "start"} == {1}


async def test_a_killed_worker_gives_its_slots_back_within_the_lease(
    flow_app: App, tmp_path: Path, worker_process: Callable[..., WorkerProcess]
) -> None:
    ledger = tmp_path / "ledger"
    client = await flow_app.client()
    # Given a worker running two tasks that fill the global limit (2) and their keys' slots
    (first,) = await start_workers(worker_process, ledger, 1)
    handles = [await flowctl.both.enqueue(t, "long", 2.0) for t in ("x", "y")]
    handles += [await flowctl.both.enqueue(t, "next", 0.1) for t in ("x", "y")]
    await wait_until(lambda: len([r for r in events(ledger) if r[0] == "start"]) == 2, 15)
    slots = await client.connection.streams.state(
        flow_app.names.limits_stream, subjects_filter=flow_app.names.limits_filter
    )
    assert len([s for s in slots.subjects if ".slot." in s]) == 2
    # When it is SIGKILLed while holding them
    first.kill()
    # Then the per-key slots expire within the lease (ack_wait 2 s)
    # (10 s: five leases; a slot nobody renews must not outlive its TTL for long)
    await wait_until(lambda: _slots_gone(flow_app), timeout=10, every=0.05)
    # and another worker runs the killed tasks again (attempt 2): the lane's global slots
    # came back with their deliveries; then the tasks that waited run
    await start_workers(worker_process, ledger, 1)
    await wait_until(lambda: len([r for r in events(ledger) if r[3] == 2]) == 2, 15)
    for handle in handles:
        await handle.result(timeout=30)
    survivors = [r for r in events(ledger) if r[4] != first.proc.pid]
    assert most_at_once(survivors) <= 2


async def _slots_gone(app: App) -> bool:
    client = await app.client()
    state = await client.connection.streams.state(
        app.names.limits_stream, subjects_filter=app.names.limit_subject("slot", "*.*", ">")
    )
    return not state.subjects


async def test_a_task_outside_its_lane_is_moved_there_and_keeps_its_attempts(
    app: App,
) -> None:
    attempts: list[int] = []

    @app.task(max_concurrency=1, max_retries=5)
    async def laned(n: int) -> int:
        import taskq

        attempts.append(taskq.current().attempt)
        return n

    async with running_worker(app) as worker:
        client = await app.client()
        # a producer that does not know the lane (a foreign one, a DLQ requeue) publishes
        # to the queue's subject, with 2 attempts already spent
        envelope = Envelope(id="outside-1", task="laned", args=[7])
        placed = client.placed(envelope, "default", None)
        placed.headers[SPENT] = "2"
        await client.publish_placed(placed)
        assert await app.handle("outside-1").result(timeout=10) == 7
        assert worker.stats["held"] == 1  # moved once, through a held schedule
    assert attempts == [3]  # attempt 3: the 2 spent + this one


async def test_a_held_task_whose_worker_died_before_the_ack_runs_once(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []

    @app.task(concurrency_key="k", max_per_key=1, ack_wait=1.0)
    async def keyed(k: str, label: str, seconds: float) -> None:
        ran.append(label)
        await asyncio.sleep(seconds)

    # Given a settler that "dies" after storing a held copy but before acknowledging
    original = Settler._hold
    crashes: list[str] = []

    async def store_then_crash(self: Settler, job: object, hold: object) -> None:
        if not crashes:
            admission = self._admission
            await admission.hold(job, hold)  # type: ignore[arg-type]
            crashes.append("crashed")
            raise RuntimeError("worker died before the ack")
        await original(self, job, hold)  # type: ignore[arg-type]

    monkeypatch.setattr(Settler, "_hold", store_then_crash)
    async with running_worker(app, concurrency=4) as worker:
        holder = await keyed.enqueue("same", "holder", 1.5)
        waiter = await keyed.enqueue("same", "waiter", 0.0)
        await holder.result(timeout=20)
        await waiter.result(timeout=20)  # run from its held copy
        # the unacknowledged delivery comes back (the worker NAKs what failed to settle,
        # `failed_again` later)
        # and is recognised as held already: acknowledged, not run. (`stats["held"]` is no
        # sign of it: the waiter's released copy may itself be held again while the holder
        # still runs, on a loaded machine.)
        client = await app.client()
        stream = app.names.queue_stream("default")

        async def emptied() -> bool:
            return (await client.connection.streams.state(stream)).messages == 0

        await wait_until(emptied, timeout=30)
        await asyncio.sleep(0.5)  # a negative: room for the held copy to (wrongly) run again
    # Then the waiter ran exactly once
    assert crashes == ["crashed"]
    assert sorted(ran) == ["holder", "waiter"]
    assert worker.stats["held"] >= 1


async def test_concurrency_options_are_checked(app: App) -> None:
    for bad in (
        {"max_concurrency": 0},
        {"max_concurrency": 2.5},
        {"max_per_key": 2},  # without concurrency_key
        {"concurrency_key": "nope", "max_per_key": 2},  # not an argument
        {"concurrency_key": "n"},  # without max_per_key
        {"max_concurrency": 2, "ack_wait": 100.0},  # over duplicate_window / 2
    ):
        with pytest.raises(ConfigError):

            @app.task(name=f"bad{len(app.tasks)}", **bad)
            async def bad_task(n: int) -> None: ...


async def test_a_cancelled_parked_task_woken_first_passes_its_wake_on(app: App) -> None:
    release = asyncio.Event()
    ran: list[int] = []

    # a long lease: a parked task is looked at again only after it (+1 s), so the second
    # parked task can only run in time if the wake reaches it
    @app.task(concurrency_key="tenant", max_per_key=1, ack_wait=60.0)
    async def report(tenant: str, n: int) -> None:
        ran.append(n)
        await release.wait()

    async with running_worker(app, concurrency=4) as worker:
        running = await report.enqueue("acme", 0)
        await wait_until(lambda: ran == [0], timeout=15)
        # the oldest parked task (its schedule first in the timer stream) is cancelled
        cancelled = await report.enqueue("acme", 1)
        await wait_until(lambda: worker.stats["held"] >= 1, timeout=15)
        waiting = await report.enqueue("acme", 2)
        await wait_until(lambda: worker.stats["held"] >= 2, timeout=15)
        assert (await cancelled.cancel()).state == "held"
        release.set()
        await running.result(timeout=15)
        # the release woke the cancelled one, judged cancelled without a slot: it woke the
        # next in its place, long before that one's recheck
        await waiting.result(timeout=20)
        assert ran == [0, 2]
        with pytest.raises(TaskCancelled):
            await cancelled.result(timeout=5)
