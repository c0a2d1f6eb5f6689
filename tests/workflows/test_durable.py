"""Durable workflows against a real server: steps, fan-out, timers, signals, failures."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from taskq import App, TaskFailed, Workflow
from tests.conftest import running_worker, wait_until


async def test_an_order_runs_its_steps_sleeps_waits_for_a_signal_and_returns(app: App) -> None:
    ran: list[str] = []

    @app.task
    async def charge(order_id: str, cents: int) -> str:
        ran.append(f"charge {order_id}")
        return f"receipt-{order_id}-{cents}"

    @app.task
    def pack(order_id: str, box: int) -> int:  # a `def` step, in a thread
        ran.append(f"pack {box}")
        return box * 10

    @app.workflow
    async def order(wf: Workflow, order_id: str, cents: int) -> dict[str, Any]:
        receipt = await wf.run(charge, order_id, cents)
        await wf.sleep(timedelta(seconds=0.2))
        ok = await wf.wait_for("approved", timeout=timedelta(seconds=60))
        boxes = await wf.gather(*(wf.run(pack, order_id, i) for i in range(3)))
        return {"receipt": receipt, "ok": ok, "boxes": boxes}

    async with running_worker(app, concurrency=8):
        run = await order.start("o-1", 1999)
        await wait_until(lambda: run.status(), timeout=30)
        await wait_until(_state_is(run, "waiting"), timeout=30)
        await run.signal("approved", {"by": "ann"})
        result = await run.result(timeout=30)
        assert await run.status() == "succeeded"
    assert result == {"receipt": "receipt-o-1-1999", "ok": {"by": "ann"}, "boxes": [0, 10, 20]}
    # each step ran once, though every event replayed the code from its journal
    assert sorted(ran) == ["charge o-1", "pack 0", "pack 1", "pack 2"]


async def test_a_signal_sent_before_the_wait_is_kept_and_a_key_makes_start_idempotent(
    app: App,
) -> None:
    @app.workflow
    async def approval(wf: Workflow) -> Any:
        return await wf.wait_for("go")

    run = await approval.options(key="only-once").start()
    again = await approval.options(key="only-once").start()
    assert again.id == run.id == "only-once"
    await run.signal("go", 42)  # no worker yet: kept in the journal
    async with running_worker(app):
        assert await run.result(timeout=30) == 42
        assert await app.workflow_run("only-once").status() == "succeeded"


async def test_a_dead_step_raises_task_failed_in_the_workflow_which_compensates(
    app: App,
) -> None:
    refunds: list[str] = []

    @app.task(max_retries=0)
    async def charge(order_id: str) -> str:
        raise ValueError(f"card declined for {order_id}")

    @app.task
    async def refund(order_id: str) -> None:
        refunds.append(order_id)

    @app.workflow
    async def saga(wf: Workflow, order_id: str) -> str:
        try:
            return str(await wf.run(charge, order_id))
        except TaskFailed as exc:
            await wf.run(refund, order_id)
            return f"refunded: {exc.message}"

    async with running_worker(app):
        run = await saga.start("o-9")
        assert await run.result(timeout=30) == "refunded: card declined for o-9"
    assert refunds == ["o-9"]


async def test_a_workflow_that_raises_fails_its_run_with_that_error(app: App) -> None:
    @app.workflow
    async def broken(wf: Workflow) -> None:
        await wf.sleep(0)
        raise RuntimeError("the workflow itself broke")

    async with running_worker(app):
        run = await broken.start()
        with pytest.raises(TaskFailed, match="the workflow itself broke") as failed:
            await run.result(timeout=30)
        assert failed.value.type == "RuntimeError"
        assert await run.status() == "dead"


async def test_cancel_ends_a_waiting_run_cancelled(app: App) -> None:
    from taskq import TaskCancelled

    @app.workflow
    async def forever(wf: Workflow) -> Any:
        return await wf.wait_for("never")

    async with running_worker(app):
        run = await forever.start()
        await wait_until(_state_is(run, "waiting"), timeout=30)
        await run.cancel()
        with pytest.raises(TaskCancelled):
            await run.result(timeout=30)
        assert await run.status() == "cancelled"


def _state_is(run: Any, state: str) -> Any:
    async def check() -> bool:
        return bool(await run.status() == state)

    return check


async def test_a_child_run_is_awaited_and_map_fans_items_out_in_order(app: App) -> None:
    @app.task
    async def square(n: int) -> int:
        return n * n

    @app.workflow
    async def ship(wf: Workflow, order_id: str) -> str:
        squares = await wf.map(square, range(5))
        return f"{order_id}:{sum(squares)}"

    @app.workflow
    async def order(wf: Workflow, order_id: str) -> str:
        return str(await wf.child(ship, order_id))

    async with running_worker(app, concurrency=8):
        run = await order.start("o-7")
        assert await run.result(timeout=30) == "o-7:30"
        child = app.workflow_run(await _child_of(app, run.id))
        assert child.id.startswith(f"{run.id}-c0-")  # its nonce: nobody can start it first
        assert await child.result(timeout=5) == "o-7:30"
        assert await child.status() == "succeeded"


async def test_cancelling_a_parent_cancels_its_child(app: App) -> None:
    from taskq import TaskCancelled

    @app.workflow
    async def waits(wf: Workflow) -> Any:
        return await wf.wait_for("never")

    @app.workflow
    async def parent(wf: Workflow) -> Any:
        return await wf.child(waits)

    async with running_worker(app):
        run = await parent.start()
        child = app.workflow_run(await _child_of(app, run.id))
        await wait_until(_state_is(child, "waiting"), timeout=30)
        await run.cancel()
        with pytest.raises(TaskCancelled):
            await child.result(timeout=30)
        assert await run.status() == "cancelled"


async def test_retry_resumes_a_failed_run_from_its_failed_step_keeping_completed_ones(
    app: App,
) -> None:
    from taskq.errors import ConfigError
    from taskq.workflows.views import show_run

    ran: list[str] = []
    fixed = {"on": False}

    @app.task
    async def reserve(order_id: str) -> str:
        ran.append("reserve")
        return f"held {order_id}"

    @app.task(max_retries=0)
    async def charge(order_id: str) -> str:
        ran.append("charge")
        if not fixed["on"]:
            raise ValueError("the card service rejects this format")
        return f"charged {order_id}"

    @app.task
    async def ship(order_id: str) -> str:
        ran.append("ship")
        return f"shipped {order_id}"

    @app.workflow
    async def order(wf: Workflow, order_id: str) -> list[str]:
        return [
            await wf.run(reserve, order_id),
            await wf.run(charge, order_id),
            await wf.run(ship, order_id),
        ]

    async with running_worker(app):
        run = await order.start("o-3")
        with pytest.raises(TaskFailed, match="rejects this format"):
            await run.result(timeout=30)
        assert await run.status() == "dead"
        fixed["on"] = True  # the code fix is deployed
        await run.retry()
        assert await run.result(timeout=30) == ["held o-3", "charged o-3", "shipped o-3"]
        assert await run.status() == "succeeded"
        view = await show_run(await app.client(), run.id)
        with pytest.raises(ConfigError, match="only a dead run can be retried"):
            await run.retry()
    # the completed step kept its result and never ran again; the failed one ran again
    assert ran == ["reserve", "charge", "charge", "ship"]
    assert [s.id for s in view.steps] == [f"{run.id}.0", f"{run.id}.1r1", f"{run.id}.2r1"]


async def test_a_runs_journal_is_sealed_at_rest_with_an_encryption_key(
    keyed: App, app: App
) -> None:
    @keyed.task
    async def secret(value: str) -> str:
        return value.upper()

    @keyed.workflow
    async def hush(wf: Workflow, value: str) -> str:
        return str(await wf.run(secret, value))

    async with running_worker(keyed):
        run = await hush.start("the-plain-text")
        assert await run.result(timeout=30) == "THE-PLAIN-TEXT"
    client = await app.client()  # the same prefix, without the key: bodies as stored
    stream = client.names.workflows_stream
    raw = await client.connection.messages.batch(stream, 1, 100)
    assert raw and all(b"the-plain-text" not in m.data and b"THE-PLAIN" not in m.data for m in raw)


async def test_a_round_too_large_for_one_message_is_recorded_in_chunks(app: App) -> None:
    from taskq.workflows import store
    from taskq.workflows.journal import MAX_EVENT_BYTES

    @app.task
    async def size(text: str) -> int:
        return len(text)

    @app.workflow
    async def fan(wf: Workflow) -> list[int]:
        # 300 commands of ~1 KiB: one round of ~300 KiB, over one journal event's limit
        return list(await wf.gather(*(wf.run(size, "x" * 1000 + str(i)) for i in range(300))))

    async with running_worker(app, concurrency=32):
        run = await fan.start()
        result = await run.result(timeout=60)
    assert result == [1000 + len(str(i)) for i in range(300)]
    events = await store.read(await app.client(), run.id)
    chunks = [e for e in events if e.kind == "chunk"]
    assert len(chunks) >= 2 and all(len(store.encoded(c)) <= MAX_EVENT_BYTES for c in chunks)


async def test_a_decision_message_claiming_a_timer_fired_early_fires_nothing(app: App) -> None:
    from taskq.workflows import store

    @app.workflow
    async def later(wf: Workflow) -> str:
        await wf.sleep(timedelta(seconds=60))
        return "woke"

    async with running_worker(app) as worker:
        run = await later.start()
        await wait_until(_state_is(run, "sleeping"), timeout=30)
        before = worker.stats["succeeded"]
        # When anyone may publish publishes the run's decision claiming its timer fired
        await app.tasks["later"].enqueue(run.id, fired=0)
        await wait_until(lambda: worker.stats["succeeded"] > before, timeout=30)
        # Then nothing fired: the timer is a minute away
        events = await store.read(await app.client(), run.id)
        assert [e for e in events if e.kind == "fired"] == []
        assert await run.status() == "sleeping"


async def test_a_start_whose_arguments_do_not_fit_fails_its_run_clearly(app: App) -> None:
    from taskq.workflows.wake import start_run

    @app.workflow
    async def typed(wf: Workflow, count: int) -> int:
        return count

    async with running_worker(app):
        # a start written by hand (any producer may): its arguments do not fit the code
        call = {"workflow": "typed", "queue": "default", "args": ["many"], "kwargs": {}}
        await start_run(await app.client(), "bad-start", call)
        with pytest.raises(TaskFailed, match="invalid arguments") as failed:
            await app.workflow_run("bad-start").result(timeout=30)
        assert failed.value.type == "ArgumentsError"


async def _child_of(app: App, run_id: str) -> str:
    """The id of the run's first child, as `taskq workflows show` tells it."""
    from taskq.workflows.views import show_run

    async def started() -> str | None:
        view = await show_run(await app.client(), run_id)
        return next((s.id for s in view.steps if s.kind == "child"), None)

    await wait_until(started, timeout=30)
    found = await started()
    assert found is not None
    return found


def _step_progress(app: App, run_id: str) -> Any:
    async def check() -> bool:
        from taskq.workflows.views import show_run

        view = await show_run(await app.client(), run_id)
        report = view.steps[0].progress
        return report is not None and report["value"] == 0.5

    return check


async def test_a_running_step_is_found_as_its_task_and_shown_running(
    app: App, nats_url: str, prefix: str
) -> None:
    """Issue 39 (3): while a step runs, `taskq task <step id>` finds it (it said unknown:
    a step's message id is not its task id) and `workflows show` says `running` and where."""
    import asyncio
    import json

    from taskq.records.heartbeats import list_workers
    from taskq.workflows.views import show_run
    from tests.conftest import cli

    app.configure(heartbeat=0.5)  # the running list is a heartbeat's: soon, then
    release = asyncio.Event()

    @app.task
    async def long_step() -> str:
        import taskq

        taskq.current().progress(0.5, "half way")
        await release.wait()
        return "ok"

    @app.workflow
    async def slow_flow(wf: Workflow) -> str:
        return str(await wf.run(long_step))

    async with running_worker(app):
        run = await slow_flow.options(key=f"L-{prefix}").start()
        step = f"{run.id}.0"

        async def listed_running() -> bool:
            return any(t.id == step for w in await list_workers(app) for t in w.running)

        await wait_until(listed_running, timeout=30)  # a heartbeat lists it
        told = await cli(nats_url, prefix, "task", step, "--json")
        assert told.returncode == 0, told.stderr
        assert json.loads(told.stdout)["state"] == "running"
        view = await show_run(await app.client(), run.id)
        assert (view.steps[0].state, bool(view.steps[0].running_on)) == ("running", True)
        await wait_until(_step_progress(app, run.id), timeout=30)  # its progress, as a task's
        shown = await cli(nats_url, prefix, "workflows", "show", run.id)
        assert "progress 50% half way" in shown.stdout, shown.stdout
        # `taskq result` and a handle's status say so too (they said `queued`)
        result = await cli(nats_url, prefix, "result", step, "--json")
        assert json.loads(result.stdout)["state"] == "running", result.stdout
        assert await app.handle(step, task="long_step").status() == "running"
        release.set()
        assert await run.result(timeout=30) == "ok"
