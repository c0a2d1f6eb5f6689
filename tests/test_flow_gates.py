"""Flow control at enqueue: unique_for, debounce, throttle (docs/flow-control.md)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from taskq import App, ConfigError
from taskq.errors import TaskDropped
from taskq.flowcontrol.keys import call_digest
from taskq.flowcontrol.store import ensure_limits
from tests.conftest import running_worker, wait_until
from tests.faults import LOSE_ACK, inject


async def stored(app: App, queue: str = "default") -> int:
    client = await app.client()
    state = await client.connection.streams.state(
        app.names.queue_stream(queue), subjects_filter=app.names.queue_filter(queue)
    )
    return state.messages


async def gone(app: App, kind: str, token: str, task: str) -> bool:
    """Whether the flow-control record of this window has expired."""
    client = await app.client()
    subject = app.names.limit_subject(kind, token, task)
    return await client.connection.messages.last(app.names.limits_stream, subject) is None


async def test_unique_for_returns_the_first_handle_and_publishes_nothing(app: App) -> None:
    @app.task
    async def charge(order: str, amount: int) -> None: ...

    first = await charge.options(unique_for=2).enqueue("o-1", 5)
    again = await charge.options(unique_for=2).enqueue("o-1", 5)
    other = await charge.options(unique_for=2).enqueue("o-1", 6)  # other arguments
    keyed = await charge.options(unique_for=2, key="order-1").enqueue("o-1", 7)
    keyed_again = await charge.options(unique_for=2, key="order-1").enqueue("o-2", 8)
    assert not first.duplicate and again.duplicate and again.id == first.id
    assert other.id != first.id and not other.duplicate
    assert keyed_again.id == keyed.id and keyed_again.duplicate
    assert await stored(app) == 3
    # the window (a per-message TTL, whole seconds) passes: its record is gone
    await wait_until(lambda: gone(app, "unique", call_digest(["o-1", 5], {}), "charge"), 15)
    later = await charge.options(unique_for=2).enqueue("o-1", 5)
    assert later.id != first.id and not later.duplicate
    assert await stored(app) == 4


async def test_unique_for_repairs_a_producer_that_died_before_publishing(app: App) -> None:
    @app.task
    async def once(n: int) -> int:
        return n

    # Given a reservation whose producer died before publishing (no message exists)
    client = await app.client()
    await ensure_limits(client)
    from taskq.flowcontrol.keys import call_digest

    subject = app.names.limit_subject("unique", call_digest([1], {}), "once")
    mark = json.dumps({"id": "orphan-1", "state": "reserved"}).encode()
    assert await client.connection.records.create(subject, mark, 30) is not None
    # When the same call is enqueued, it publishes under the reserved id
    handle = await once.options(unique_for=30).enqueue(1)
    assert handle.id == "orphan-1" and handle.duplicate
    assert await stored(app) == 1
    # and a third call is still a duplicate of it, stored once (the dedup window)
    again = await once.options(unique_for=30).enqueue(1)
    assert again.id == "orphan-1" and await stored(app) == 1
    async with running_worker(app):
        assert await handle.result(timeout=10) == 1


async def test_throttle_keeps_one_run_per_window_and_drops_the_rest(app: App) -> None:
    ran: list[int] = []

    @app.task
    async def sync_account(n: int) -> int:
        ran.append(n)
        return n

    kept = await sync_account.options(throttle=2, key="acct-1").enqueue(1)
    dropped = await sync_account.options(throttle=2, key="acct-1").enqueue(2)
    other_key = await sync_account.options(throttle=2, key="acct-2").enqueue(3)
    assert not kept.dropped and dropped.dropped and not other_key.dropped
    assert await dropped.status() == "dropped"
    with pytest.raises(TaskDropped) as info:
        await dropped.result(timeout=5)
    assert info.value.kept == kept.id and "throttled" in info.value.reason
    await wait_until(lambda: gone(app, "throttle", "acct-1", "sync_account"), 15)
    next_window = await sync_account.options(throttle=2, key="acct-1").enqueue(4)
    assert not next_window.dropped
    async with running_worker(app):
        await wait_until(lambda: sorted(ran) == [1, 3, 4], timeout=10)
    assert await stored(app) == 0


async def test_debounce_runs_once_after_the_last_call_with_its_arguments(app: App) -> None:
    ran: list[tuple[str, float]] = []

    @app.task
    async def reindex(label: str) -> str:
        ran.append((label, time.time()))
        return label

    async with running_worker(app):
        handles = []
        for label in ("a", "b", "c"):
            last_call = time.time()  # (no later than the call sets its due time)
            handles.append(await reindex.options(debounce=1, key="doc-9").enqueue(label))
            await asyncio.sleep(0.3)  # the burst itself: calls 0.3 s apart, within the second
        other = await reindex.options(debounce=1, key="doc-10").enqueue("x")
        assert len({h.id for h in handles}) == 1 and other.id != handles[0].id
        assert [h.duplicate for h in handles] == [False, True, True]
        assert await handles[0].result(timeout=10) == "c"  # the last arguments win
        await wait_until(lambda: len(ran) == 2, timeout=10)
        # nothing else fires: the burst's other wake-ups are spent (a negative, so a wait
        # longer than the burst's second, bounded)
        await asyncio.sleep(1.5)
    assert sorted(label for label, _ in ran) == ["c", "x"]
    ran_at = dict(ran)["c"]
    assert ran_at - last_call >= 1.0 - 0.05  # a second after the last call, not the first


async def test_a_gate_whose_record_write_ack_was_lost_keeps_the_call(app: App) -> None:
    """A loaded server stores a gate's record but its ack never comes: the retry finds the
    record there. It is this call's own write, so the call is the window's first: unique
    is no duplicate of itself, throttle does not drop it, debounce does not report a
    burst already going on. Each task then runs once."""
    ran: list[str] = []

    @app.task
    async def touch(label: str) -> str:
        ran.append(label)
        return label

    client = await app.client()
    gated = {
        "unique": touch.options(unique_for=30),
        "throttle": touch.options(throttle=30, key="t"),
        "debounce": touch.options(debounce=0.2, key="d"),
    }
    handles = {}
    for kind, options in gated.items():
        with inject(client.connection) as faults:
            faults.lose_ack(f"*.limit.{kind}.*.{touch.name}")
            handles[kind] = await options.enqueue(kind)
        assert LOSE_ACK in [c.fault for c in faults.calls], kind
    assert [k for k, h in handles.items() if h.duplicate or h.dropped] == []
    async with running_worker(app):
        for kind, handle in handles.items():
            assert await handle.result(timeout=10) == kind
    assert sorted(ran) == sorted(gated)


async def test_gate_options_are_checked(app: App) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    for bad in (
        {"throttle": 5},  # no key
        {"debounce": 5},
        {"unique_for": 0},
        {"unique_for": -1},
        {"throttle": "5", "key": "k"},
        {"unique_for": 5, "throttle": 5, "key": "k"},
        {"debounce": 5, "key": "k", "countdown": 3},
    ):
        with pytest.raises(ConfigError):
            noop.options(**bad)
    with pytest.raises(ConfigError):
        await noop.options(unique_for=5).enqueue_many([[1], [2]])
