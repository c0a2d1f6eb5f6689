"""chain, group, chord: values, failure, and the chord callback exactly once."""

from __future__ import annotations

import asyncio
import time

import pytest

from taskq import App, TaskFailed, chain, chord, group
from taskq.dlq.record import EnvelopeOriginal
from taskq.records.envelope import Envelope
from taskq.workflows.state import WORKFLOW_STATE
from tests.conftest import running_worker, wait_until


def arithmetic(app: App) -> tuple:
    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    @app.task
    def mul(a: int, b: int) -> int:
        return a * b

    @app.task
    async def total(values: list[int], bonus: int = 0) -> int:
        calls.append(values)
        return sum(values) + bonus

    calls: list[list[int]] = []
    return add, mul, total, calls


async def test_chain_group_chord_values(app: App) -> None:
    add, mul, total, calls = arithmetic(app)
    async with running_worker(app):
        chained = await chain(add.s(1, 2), mul.s(10), add.s(5)).enqueue()
        assert await chained.result(timeout=15) == 35  # ((1+2)*10)+5
        grouped = await group(add.s(1, 1), mul.s(3, 3), add.s(0, 7)).enqueue()
        assert await grouped.result(timeout=15) == [2, 9, 7]
        chorded = await chord(group(*(add.s(i, i) for i in range(5))), total.s(bonus=1)).enqueue()
        assert await chorded.result(timeout=15) == 21  # 0+2+4+6+8 + 1
    assert calls == [[0, 2, 4, 6, 8]]


async def test_failed_member_fails_the_workflow_and_callback_never_runs(app: App) -> None:
    add, _mul, total, calls = arithmetic(app)

    @app.task(max_retries=0)
    async def explode(x: int) -> int:
        raise ValueError(f"member {x} failed")

    async with running_worker(app):
        handle = await chord(group(add.s(1, 2), explode.s(3)), total.s()).enqueue()
        with pytest.raises(TaskFailed) as info:
            await handle.result(timeout=15)
        failing_chain = await chain(add.s(1, 1), explode.s()).enqueue()
        with pytest.raises(TaskFailed):
            await failing_chain.result(timeout=15)
    assert info.value.type == "ValueError" and "member 3 failed" in info.value.message
    assert calls == []
    from taskq.dlq.browse import list_dead

    records = await list_dead(app)
    assert records and all(
        isinstance(r.message, EnvelopeOriginal) and r.message.flow for r in records
    )  # the DLQ names the workflow


async def test_chord_callback_exactly_once_when_a_member_is_redelivered(app: App) -> None:
    """A member that recorded its result and is delivered again (its worker died before the
    ack, say) must not trigger a second callback."""
    add, _mul, total, calls = arithmetic(app)
    broker = (await app.client()).connection
    async with running_worker(app) as worker:
        handle = await chord(group(add.s(1, 0), add.s(2, 0), add.s(3, 0)), total.s()).enqueue()
        assert await handle.result(timeout=15) == 6
        # replay every member exactly as it was delivered, under fresh message ids
        flow_id = handle.id.rpartition(".")[0]
        for index in range(3):
            record = Envelope(
                id=f"{flow_id}.{index}",
                task="add",
                args=[index + 1, 0],
                workflow=WORKFLOW_STATE.validate_python(
                    {
                        "id": flow_id,
                        "kind": "chord",
                        "size": 3,
                        "index": index,
                        "final": handle.id,
                        "callback": {"task": "total", "queue": "default", "args": [], "kwargs": {}},
                    }
                ),
            )
            await broker.publish(
                app.names.queue_subject("default", "add"),
                record.encode(),
                {"Nats-Msg-Id": f"replay-{index}"},
            )
        await wait_until(lambda: worker.stats["succeeded"] >= 3 + 1 + 3, timeout=15)
        await asyncio.sleep(0.5)  # a negative: room for a second callback to (wrongly) run
    assert calls == [[1, 2, 3]]  # the callback ran once


async def test_thousand_member_chord(app: App) -> None:
    @app.task
    async def ident(i: int) -> int:
        return i

    @app.task
    async def count(values: list[int]) -> int:
        return len(values)

    async with running_worker(app, concurrency=64):
        start = time.perf_counter()
        handle = await chord(group(*(ident.s(i) for i in range(1000))), count.s()).enqueue()
        assert await handle.result(timeout=120) == 1000
        took = time.perf_counter() - start
    print(f"1,000-member chord: {took:.2f} s end to end")
