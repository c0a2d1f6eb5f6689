"""A durable workflow app for CLI tests: an order that charges, waits for approval, ships."""

from __future__ import annotations

from typing import Any

from taskq import App, Workflow

app = App()


@app.task
async def charge(order_id: str, cents: int) -> str:
    return f"receipt-{order_id}-{cents}"


@app.workflow
async def order(wf: Workflow, order_id: str, cents: int) -> dict[str, Any]:
    receipt = await wf.run(charge, order_id, cents)
    approval = await wf.wait_for("approved")
    return {"receipt": receipt, "approval": approval}
