"""A completed step never runs again, whatever the server does (issue 38, 8 and 9): a step
whose outcome is journaled and that a restarted server delivers as new is acknowledged
unrun; a store that refuses the outcome for a while neither reruns the step (its lease is
kept while the outcome waits) nor spends its attempts, and the run ends as it should."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import nats
import pytest

from taskq import App, Workflow
from taskq.records.clock import now_iso
from taskq.records.envelope import Envelope
from taskq.workflows import store
from taskq.workflows.state import RunStepState
from tests.conftest import running_worker, wait_until
from tests.reliability.test_storage_full import small_server


def _state_is(run: Any, state: str) -> Any:
    async def check() -> bool:
        return bool(await run.status() == state)

    return check


async def test_a_first_delivery_of_a_step_whose_outcome_is_journaled_runs_nothing(
    app: App,
) -> None:
    calls: list[int] = []

    @app.task
    async def once(i: int) -> int:
        calls.append(i)
        return i

    @app.workflow
    async def flow(wf: Workflow, i: int) -> int:
        value = await wf.run(once, i)
        await wf.wait_for("go")
        return int(value)

    async with running_worker(app) as worker:
        run = await flow.start(5)
        await wait_until(_state_is(run, "waiting"), timeout=30)
        # Given the step's message delivered again as a first delivery, as a server
        # SIGKILLed before it stored the step's ack delivers it after its restart
        client = await app.client()
        events = await store.read(client, run.id)
        round_ = next(e for e in events if e.kind == "decided" and e.details.get("commands"))
        command = round_.details["commands"][0]
        step = Envelope(
            id=f"{run.id}.0",
            task=once.name,
            args=command.details["args"],
            kwargs=command.details["kwargs"],
            enqueued_at=now_iso(),
            workflow=RunStepState(
                id=run.id, n=0, workflow=flow.name, queue="default", at=round_.seq
            ),
        )
        held = worker.stats["held"]
        await client.publish_envelope(step, "default", msg_id="as-new-after-a-restart")
        # Then it is acknowledged unrun: its outcome is in the journal
        await wait_until(lambda: worker.stats["held"] > held, timeout=30)
        await run.signal("go")
        assert await run.result(timeout=30) == 5
    assert calls == [5]


async def test_a_full_store_neither_reruns_a_step_nor_fails_its_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="taskq")
    with small_server(tmp_path, "max_file_store: 2MB") as server:
        app = App(url=server.url, prefix="sfull")
        release = asyncio.Event()
        calls: list[int] = []

        @app.task(ack_wait=1.0, max_retries=1)
        async def step(i: int) -> int:
            calls.append(i)
            await release.wait()
            return i

        @app.workflow
        async def flow(wf: Workflow, i: int) -> int:
            return int(await wf.run(step, i))

        try:
            async with running_worker(app):
                run = await flow.start(1)
                await wait_until(lambda: calls == [1], timeout=30)
                # Given a store filled to its limit while the step runs
                nc = await nats.connect(server.url)
                js = nc.jetstream()
                await js.add_stream(name="FILLER", subjects=["filler.>"])
                for _ in range(1000):
                    try:
                        await js.publish("filler.x", b"x" * 10_000)
                    except nats.js.errors.APIError:
                        break
                else:
                    raise AssertionError("the store never filled")
                # When the step ends and its outcome is refused
                release.set()
                waiting = "its outcome waits for the store"
                await wait_until(
                    lambda: any(waiting in r.getMessage() for r in caplog.records), timeout=30
                )
                # for three times the step's ack_wait (a negative: room for a redelivery)
                await asyncio.sleep(3.0)
                await js.purge_stream("FILLER")
                await nc.close()
                # Then the run ends with the step's result, the step having run once
                assert await run.result(timeout=60) == 1
            assert calls == [1]
        finally:
            await app.aclose()
