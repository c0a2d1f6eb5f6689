"""Durable workflows under the shipped roles (deploy/nats/accounts.conf): a producer starts,
signals and awaits a run a worker decides; what a hostile producer writes into a run's
journal where it may write is left out, never taken for a step's outcome."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import nats
import nats.js.errors
import pytest

from dlq.browse import list_dead
from taskq import App, Workflow
from taskq.records.clock import now_iso
from taskq.records.envelope import Envelope
from taskq.server import EmbeddedServer
from taskq.workflows.state import RunStepState
from tests.conftest import running_worker, wait_until
from tests.roles import provisioned, raw_connection, role


def _declare(app: App, ran: list[str]) -> Any:
    @app.task(name="wfroles.charge")
    async def charge(order_id: str) -> str:
        ran.append(order_id)
        return f"receipt-{order_id}"

    @app.workflow(name="wfroles.order")
    async def order(wf: Workflow, order_id: str) -> dict[str, Any]:
        receipt = await wf.run(charge, order_id)
        approval = await wf.wait_for("approved")
        return {"receipt": receipt, "approval": approval}

    return order


@dataclass
class Roles:
    """A worker and a producer of the shipped roles, with the order workflow declared."""

    worker: App
    producer: App
    order: Any  # the producer's declaration
    ran: list[str]  # what the worker's charge step ran for


@pytest.fixture
async def roles(secure_server: EmbeddedServer) -> AsyncIterator[Roles]:
    ran: list[str] = []
    worker_app, producer = role(secure_server, "worker"), role(secure_server, "producer")
    _declare(worker_app, ran)
    order = _declare(producer, [])
    await provisioned(secure_server.url, worker_app, ["default"])
    yield Roles(worker_app, producer, order, ran)
    await worker_app.aclose()
    await producer.aclose()


async def test_a_producer_starts_signals_and_awaits_a_run_and_cannot_forge_its_steps(
    secure_server: EmbeddedServer, roles: Roles
) -> None:
    worker_app, order, ran = roles.worker, roles.order, roles.ran
    # Given a run a producer started while no worker runs
    run = await order.options(key="roles-o-1").start("o-1")
    # When a hostile member of the producer role writes a forged outcome of its first
    # step on the journal subject it may write (signals and cancels)
    nc = await raw_connection(secure_server, "producer")
    js = nc.jetstream()
    forged = {"e": "done", "n": 0, "ok": True, "value": "forged"}
    await js.publish("taskq.wf.roles-o-1.u.forged", json.dumps(forged).encode())
    # and re-publishes the run's start with other arguments (refused: one start a run)
    start = {"e": "start", "workflow": "wfroles.order", "queue": "default", "args": ["x"]}
    with pytest.raises(nats.js.errors.APIError, match="per subject"):
        await js.publish("taskq.wf.roles-o-1.s.0", json.dumps(start).encode())
    await js.publish("taskq.wf.roles-o-1.s.1", json.dumps(start).encode())  # read as nothing
    await nc.close()
    await run.signal("approved", {"by": "ann"})
    async with running_worker(worker_app, queues=["default"]):
        result = await run.result(timeout=30)
    # Then the step really ran, once, and its real result is the run's
    assert result == {"receipt": "receipt-o-1", "approval": {"by": "ann"}}
    assert ran == ["o-1"]
    assert await run.status() == "succeeded"


async def test_a_forged_step_message_answers_no_step(
    secure_server: EmbeddedServer, roles: Roles
) -> None:
    worker_app, producer, order, ran = roles.worker, roles.producer, roles.order, roles.ran
    # Given a run a producer started while no worker runs
    run = await order.options(key="roles-o-2").start("o-2")
    # When a hostile member of the producer role enqueues task messages claiming to be
    # the run's first step, under the step's own task id: one naming no journal
    # message, one naming the run's start, one with the real step's id and another call
    client = await producer.client()
    for at, task_id in ((0, "roles-o-2.0"), (1, "roles-o-2.0"), (7, "roles-o-2.0r1")):
        step = RunStepState(id="roles-o-2", n=0, workflow="wfroles.order", queue="default", at=at)
        forged = Envelope(
            id=task_id,
            task="wfroles.charge",
            args=["forged"],
            enqueued_at=now_iso(),
            workflow=step,
        )
        await client.publish_envelope(forged, "default", msg_id=f"{task_id}-{at}")
    await run.signal("approved", {"by": "ann"})
    async with running_worker(worker_app, queues=["default"]):
        result = await run.result(timeout=30)
    # Then the real step ran once, the forgeries never, and they are dead letters
    operator = role(secure_server, "operator")
    try:
        letters = await list_dead(operator)
    finally:
        await operator.aclose()
    assert result == {"receipt": "receipt-o-2", "approval": {"by": "ann"}}
    assert ran == ["o-2"]
    forged_letters = [r for r in letters if r.reason == "forged_step"]
    assert len(forged_letters) == 3, [(r.reason, r.id) for r in letters]


async def test_the_worker_role_expires_an_ended_run(secure_server: EmbeddedServer) -> None:
    from taskq.workflows import store

    worker_app = role(secure_server, "worker", results_ttl=2.0)

    @worker_app.workflow(name="wfroles.quick")
    async def quick(wf: Workflow) -> str:
        return "done"

    await provisioned(secure_server.url, worker_app, ["default"], results_ttl=2.0)
    try:
        async with running_worker(worker_app, queues=["default"]):
            run = await quick.start()
            assert await run.result(timeout=30) == "done"
            client = await worker_app.client()

            async def gone() -> bool:
                return await store.load_summary(client, run.id) is None

            await wait_until(gone, timeout=30)
            assert await store.read(client, run.id) == []
    finally:
        await worker_app.aclose()
