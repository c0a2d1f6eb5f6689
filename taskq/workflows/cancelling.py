"""A cancelled run's last stretch: the cancel reaches its code as `asyncio.CancelledError`
raised from the `wf` call it awaits (taskq.workflows.replay), what ran then is cancelled,
the code may run compensation steps for up to its workflow's `cancel_grace`, and the run
ends `cancelled` when the code ends (re-raising, or returning) or the grace has passed.

Temporal's Python SDK delivers a workflow's cancellation the same way. The grace bounds
what a cancel may still cost: code that catches the error and waits forever ends anyway.
"""

from __future__ import annotations

import asyncio
from typing import Any

from taskq.client import Client
from taskq.records.clock import format_epoch
from taskq.workflows.end import cancel_unfinished
from taskq.workflows.journal import error_details
from taskq.workflows.replay import Replayer
from taskq.workflows.state import RunStepState
from taskq.workflows.wake import SKEW, Trigger, grace_cause, trigger


class CancelGraceOver(asyncio.CancelledError):
    """A cancelled run's code did not end within its `cancel_grace`: it was ended."""


def grace_ends(replayer: Replayer) -> float:
    """When the cancelled run's compensation must be over (epoch seconds): its grace
    after the server stored the cancel (after now, for a cancel stored at no known time)."""
    return (replayer.cancelled_at or replayer.clock.time()) + replayer.cancel_grace


def grace_over(replayer: Replayer) -> bool:
    """Whether the run was cancelled and its code's grace has passed (a little early is
    taken as passed: the decision at its end may come before the time, by this worker's
    clock, and would then decide nothing)."""
    early = min(SKEW, replayer.cancel_grace / 10)
    return replayer.cancel_seen and replayer.clock.time() + early >= grace_ends(replayer)


def cancelled_end(replayer: Replayer) -> dict[str, Any] | None:
    """The round's `end` for a run a cancel came to: `cancelled` (with the compensation's
    error, or the value the code returned) once its code ended or its grace is over; None
    while it compensates, and None when the code ended on its own before the cancel reached
    it (its own end stands)."""
    ended = replayer.ended
    if replayer.cancel_at < 0:  # the code never awaited anything since the cancel came
        return None if ended is not None else {"state": "cancelled"}
    if ended is None:
        if not grace_over(replayer):
            return None
        late = CancelGraceOver(
            f"workflow run {replayer.run_id} was ended {replayer.cancel_grace:g} s after "
            "its cancel, still compensating (its workflow's cancel_grace)"
        )
        return {"state": "cancelled", "error": error_details(late)}
    if ended.error is None:
        return {"state": "cancelled", "value": ended.value}
    if isinstance(ended.error, asyncio.CancelledError):
        return {"state": "cancelled"}
    return {"state": "cancelled", "error": error_details(ended.error)}


async def carry_cancel(client: Client, here: RunStepState, replayer: Replayer) -> None:
    """Once the code got the cancel: what it awaited then is cancelled (steps, children),
    and the run's decision at the end of its grace is published."""
    if replayer.cancel_at < 0 or replayer.cancels_sent:
        return
    await cancel_unfinished(client, here.id, replayer, before=replayer.cancel_at)
    eta = format_epoch(grace_ends(replayer))
    await trigger(client, here, Trigger(grace_cause(replayer.retries), eta))
    replayer.cancels_sent = True
