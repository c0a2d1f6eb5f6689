"""Waking a durable workflow run: its next decision published as a task message of the
workflow's name on its queue, once per cause (the message id names the run and the cause:
a step's end, a timer, a signal, a cancel), optionally due later (a durable timer)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from taskq.client import Client
from taskq.flowcontrol.held import Holder
from taskq.records.clock import now_iso, parse_time
from taskq.records.envelope import Envelope
from taskq.workflows.journal import Event
from taskq.workflows.state import RunStepState

SKEW = 5.0  # seconds a timer may be taken as due before its time (clocks differ)


@dataclass(frozen=True)
class Trigger:
    """Why a run's next decision is published: its dedup id part and its due time."""

    why: str
    eta: str | None = None
    fired: int = -1  # a timer of this command fired (appended by the decision)
    expire: bool = False  # the run ended `results_ttl` ago: its journal and summary go


async def trigger(client: Client, run: RunStepState, cause: Trigger) -> None:
    """Publish the run's next decision, once per cause; one due later than a worker waits
    for a task goes straight into the queue's timers as a schedule (decisions run on a
    worker of the run's queue, which may write them), saving a delivery and its hold."""
    envelope = Envelope(
        id=decision_id(run, cause.why),
        task=run.workflow,
        args=[run.id],
        kwargs=_kwargs(cause),
        enqueued_at=now_iso(),
        eta=cause.eta,
    )
    due = parse_time(cause.eta) if cause.eta else None
    soon = client.settings.timings.in_worker_wait
    if due is None or due.timestamp() - client.clock.time() <= soon:
        await client.publish_envelope(envelope, run.queue)
        return
    part = await client.place_message(run.queue, envelope.id)
    placed = client.placed(envelope, run.queue, part)
    kind = "expire" if cause.expire else "timer"
    await Holder(client, run.queue).store(placed, due, internal=kind)


def timer_cause(n: int, retries: int) -> str:
    """The cause of command `n`'s timer (a sleep, a wait's timeout) after `retries`
    retries of its run: a retried run's timers are new ones."""
    return f"t{n}" + (f"r{retries}" if retries else "")


def grace_cause(retries: int) -> str:
    """The cause of a cancelled run's decision at the end of its `cancel_grace`."""
    return f"grace{retries}"


def decision_id(run: RunStepState, why: str) -> str:
    """The task id of the run's decision published for `why` (with a digest of the run's
    secret: an id anyone could compute could be published first, and the server would drop
    this decision, or timer, as its duplicate)."""
    return f"{run.id}.d{why}.{run.digest(why)}"


def _kwargs(cause: Trigger) -> dict[str, Any]:
    if cause.expire:
        return {"expire": True}
    return {"fired": cause.fired} if cause.fired >= 0 else {}


async def start_run(
    client: Client,
    run_id: str,
    call: dict[str, Any],
    parent: RunStepState | None = None,
    secret: str | None = None,
) -> bool:
    """Start run `run_id` of `call["workflow"]` (on `call["queue"]`, with its `args` and
    `kwargs`): its start event appended only to an empty journal, its summary, its first
    decision. False when the run existed already (the same run: idempotent). `secret`:
    the run's (random when not given), kept in its start, which only workers read."""
    from taskq.workflows import store

    name, queue = str(call["workflow"]), str(call["queue"])
    await store.ensure_workflows(client)
    start = Event.make(
        "start",
        workflow=name,
        queue=queue,
        args=list(call.get("args", [])),
        kwargs=dict(call.get("kwargs", {})),
        at=now_iso(),
        parent=parent.model_dump(exclude_none=True) if parent is not None else None,
        secret=secret or secrets.token_hex(16),
    )
    # its summary is the first decision's to write: a producer may start a run, but not
    # write the runs bucket
    fresh = await store.append_after(client, run_id, start, 0) is not None
    here = RunStepState(id=run_id, n=0, workflow=name, queue=queue, tag=start.details["secret"])
    await trigger(client, here, Trigger("0"))
    return fresh
