"""Waking a durable workflow run: its next decision published as a task message of the
workflow's name on its queue, once per cause (the message id names the run and the cause:
a step's end, a timer, a signal, a cancel), optionally due later (a durable timer)."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.client import Client
from taskq.records.clock import now_iso
from taskq.records.envelope import Envelope
from taskq.workflows.state import RunStepState


@dataclass(frozen=True)
class Trigger:
    """Why a run's next decision is published: its dedup id part and its due time."""

    why: str
    eta: str | None = None
    fired: int = -1  # a timer of this command fired (appended by the decision)


async def trigger(client: Client, run: RunStepState, cause: Trigger) -> None:
    """Publish the run's next decision, once per cause."""
    envelope = Envelope(
        id=f"{run.id}.d{cause.why}",
        task=run.workflow,
        args=[run.id],
        kwargs={"fired": cause.fired} if cause.fired >= 0 else {},
        enqueued_at=now_iso(),
        eta=cause.eta,
    )
    await client.publish_envelope(envelope, run.queue)
