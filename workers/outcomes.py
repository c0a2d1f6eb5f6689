"""What the results bucket records for each verdict (written before the message settles)."""

from __future__ import annotations

import traceback
from typing import Any

from taskq.policy import Ack, Dead, Decision, Failure, Nak, Outcome, Success
from taskq.results import ResultRecord
from taskq.task import Task


def result_record(
    task: Task[Any, Any] | None,
    name: str,
    decision: Decision,
    outcome: Outcome | None,
    attempts: int,
) -> ResultRecord | None:
    """The record for this verdict, or None when nothing is to be stored.

    A success stores its return value (JSON) unless the task opted out with
    `store_result=False`; failures are always stored, so waiters learn the end.
    """
    if isinstance(decision, Ack):
        if task is not None and not task.store_result:
            return None
        value = outcome.value if isinstance(outcome, Success) else None
        # built by us from trusted values: no validation on the hot path
        return ResultRecord.model_construct(
            state="succeeded", task=name, result=value, attempts=attempts
        )
    error = _error(outcome, decision)
    if isinstance(decision, Nak):
        return ResultRecord(state="failed", task=name, error=error, attempts=attempts)
    assert isinstance(decision, Dead)
    return ResultRecord(
        state="dead", task=name, error=error, reason=decision.reason, attempts=attempts
    )


def _error(outcome: Outcome | None, decision: Decision) -> dict[str, str]:
    if isinstance(outcome, Failure):
        error = outcome.error
        trace = outcome.traceback or "".join(
            traceback.format_exception(type(error), error, error.__traceback__)
        )
        return {"type": type(error).__name__, "message": str(error), "traceback": trace}
    detail = decision.detail if isinstance(decision, Dead) else ""
    return {"type": "", "message": detail, "traceback": ""}
