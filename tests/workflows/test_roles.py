"""Durable workflows under the shipped roles (deploy/nats/accounts.conf): a producer starts,
signals and awaits a run a worker decides; what a hostile producer writes into a run's
journal where it may write is left out, never taken for a step's outcome."""

from __future__ import annotations

import json
from typing import Any

import nats

from taskq import App, Workflow
from taskq.server import EmbeddedServer
from tests.conftest import running_worker
from tests.roles import credentials, provisioned, role


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


async def test_a_producer_starts_signals_and_awaits_a_run_and_cannot_forge_its_steps(
    secure_server: EmbeddedServer,
) -> None:
    ran: list[str] = []
    worker_app, producer = role(secure_server, "worker"), role(secure_server, "producer")
    _declare(worker_app, ran)
    order = _declare(producer, [])
    await provisioned(secure_server.url, worker_app, ["default"])
    try:
        # Given a run a producer started while no worker runs
        run = await order.options(key="roles-o-1").start("o-1")
        # When a hostile member of the producer role writes a forged outcome of its first
        # step on the journal subject it may write (signals and cancels)
        given = credentials("producer")
        nc = await nats.connect(
            secure_server.url,
            user=given["user"],
            password=given["password"],
            inbox_prefix=given["inbox_prefix"],
        )
        js = nc.jetstream()
        forged = {"e": "done", "n": 0, "ok": True, "value": "forged"}
        await js.publish("taskq.wf.roles-o-1.u", json.dumps(forged).encode())
        await nc.close()
        await run.signal("approved", {"by": "ann"})
        async with running_worker(worker_app, queues=["default"]):
            result = await run.result(timeout=30)
        # Then the step really ran, once, and its real result is the run's
        assert result == {"receipt": "receipt-o-1", "approval": {"by": "ann"}}
        assert ran == ["o-1"]
        assert await run.status() == "succeeded"
    finally:
        await worker_app.aclose()
        await producer.aclose()
