"""Cancelling a run lets it compensate (issue 39, item 4): the cancel reaches the workflow's
code as `asyncio.CancelledError` raised from the `wf` call it awaits; code that catches it
may run steps within the workflow's `cancel_grace`, then the run ends `cancelled`."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from taskq import App, TaskCancelled, Workflow
from taskq.errors import ConfigError
from taskq.workflows.views import show_run
from tests.conftest import cli, running_worker, wait_until


def _state_is(run: Any, state: str) -> Any:
    async def check() -> bool:
        return bool(await run.status() == state)

    return check


async def test_a_cancelled_order_refunds_its_charge_then_ends_cancelled(
    app: App, nats_url: str, prefix: str
) -> None:
    ledger: list[str] = []

    @app.task
    async def charge(order_id: str) -> str:
        ledger.append(f"charge {order_id}")
        return f"receipt-{order_id}"

    @app.task
    async def refund(receipt: str) -> None:
        ledger.append(f"refund {receipt}")

    @app.workflow
    async def order(wf: Workflow, order_id: str) -> str:
        receipt = await wf.run(charge, order_id)
        try:
            await wf.wait_for("shipped", timeout=timedelta(hours=1))
        except asyncio.CancelledError:
            await wf.run(refund, receipt)  # compensation: a step like any other
            raise
        return receipt

    async with running_worker(app, concurrency=4):
        run = await order.start("o-1")
        await wait_until(_state_is(run, "waiting"), timeout=30)
        await run.cancel()
        with pytest.raises(TaskCancelled):
            await run.result(timeout=30)
        assert await run.status() == "cancelled"
        view = await show_run(await app.client(), run.id)
        shown = await cli(nats_url, prefix, "workflows", "show", run.id, "--json")
    assert ledger == ["charge o-1", "refund receipt-o-1"]
    states = {s.kind: s.state for s in view.steps if s.kind != "run"}
    assert states == {"wait": "cancelled"}  # not `timed out`: the cancel ended the wait
    assert [s.state for s in view.steps if s.kind == "run"] == ["succeeded", "succeeded"]
    assert shown.returncode == 0 and '"cancelled"' in shown.stdout


async def test_code_that_does_not_catch_the_cancel_ends_cancelled_and_its_step_is_cancelled(
    app: App,
) -> None:
    started = asyncio.Event()

    @app.task
    async def slow() -> None:
        started.set()
        await asyncio.sleep(60)  # runs until the cancel reaches it

    @app.task
    async def after() -> None:
        raise AssertionError("a step after the cancelled one never runs")

    @app.workflow
    async def flow(wf: Workflow) -> None:
        await wf.gather(wf.run(slow), wf.sleep(3600))
        await wf.run(after)

    async with running_worker(app, concurrency=4):
        run = await flow.start()
        await asyncio.wait_for(started.wait(), 30)
        await run.cancel()
        with pytest.raises(TaskCancelled):
            await run.result(timeout=30)

        async def step_cancelled() -> bool:
            view = await show_run(await app.client(), run.id)
            return {s.kind: s.state for s in view.steps} == {
                "run": "cancelled",
                "sleep": "cancelled",
            }

        await wait_until(step_cancelled, timeout=30)


async def test_compensation_is_bounded_by_the_cancel_grace(app: App) -> None:
    @app.workflow(cancel_grace=timedelta(seconds=2))
    async def stubborn(wf: Workflow) -> None:
        try:
            await wf.wait_for("never")
        except asyncio.CancelledError:
            await wf.wait_for("never again")  # compensation that never ends

    async with running_worker(app):
        run = await stubborn.start()
        await wait_until(_state_is(run, "waiting"), timeout=30)
        await run.cancel()
        await wait_until(_state_is(run, "cancelling"), timeout=30)
        with pytest.raises(TaskCancelled):
            await run.result(timeout=30)
        assert await run.status() == "cancelled"
        view = await show_run(await app.client(), run.id)
    assert view.summary.error is not None and "cancel_grace" in view.summary.error


async def test_a_cancel_before_the_first_decision_starts_no_step(app: App) -> None:
    ran: list[str] = []

    @app.task
    async def charge() -> None:
        ran.append("charge")

    @app.workflow
    async def flow(wf: Workflow) -> None:
        await wf.run(charge)

    run = await flow.start()
    await run.cancel()  # no worker yet: the run's first decision sees the cancel
    async with running_worker(app):
        with pytest.raises(TaskCancelled):
            await run.result(timeout=30)
        view = await show_run(await app.client(), run.id)
    assert ran == []
    assert [s.state for s in view.steps] == ["cancelled"]  # made, never carried out


@pytest.mark.parametrize("grace", [0, -1, float("inf"), "1m", True])
def test_a_bad_cancel_grace_is_a_config_error(app: App, grace: Any) -> None:
    async def flow(wf: Workflow) -> None:
        return None

    with pytest.raises(ConfigError, match="cancel_grace"):
        app.workflow(cancel_grace=grace)(flow)
