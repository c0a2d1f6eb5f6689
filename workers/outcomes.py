"""What the results bucket records for each verdict (written before the message settles)."""

from __future__ import annotations

import traceback
from typing import Any

from taskq.policy import Ack, Cancel, Dead, Decision, Failure, Nak, Outcome, Success
from taskq.records.clock import stamp
from taskq.records.envelope import Envelope
from taskq.records.heartbeats import worker_name
from taskq.records.results import ResultRecord
from taskq.workers.job import Job
from taskq.workflows.state import ChainState, ChordState, Step, final_id

_WORKER = worker_name()
# A record repeats the call's arguments only when its message is small: a big call would make
# every record as big (or too big to store); its DLQ record keeps the whole original anyway.
CALL_KEPT = 8 * 1024


def result_record(job: Job, decision: Decision, outcome: Outcome | None) -> ResultRecord | None:
    """The record for this verdict, or None when nothing is to be stored.

    A success stores its return value (JSON) unless the task opted out with
    `store_result=False`; failures and cancels are always stored, so waiters learn the end.
    Each record also says which attempt on which worker wrote it, and the call itself:
    the task's story outlives its message.
    """
    fields = record_fields(job, decision, outcome)
    # built by us from trusted values: no validation on the hot path
    return None if fields is None else ResultRecord.model_construct(**fields)


def record_fields(job: Job, decision: Decision, outcome: Outcome | None) -> dict[str, Any] | None:
    """`result_record`'s fields as a plain dict, ready to encode (the settle path's form)."""
    task = job.task
    if isinstance(decision, Ack) and task is not None and not task.store_result:
        # a requeued task's record says `queued` (taskq.dlq.requeue): its end replaces that
        if not _requeued(job):
            return None
        return _call(job) | {"state": "succeeded", "result": None}
    return _call(job) | _verdict(decision, outcome)


def _requeued(job: Job) -> bool:
    envelope = job.envelope
    return envelope is not None and "requeued_from" in envelope.meta


def _verdict(decision: Decision, outcome: Outcome | None) -> dict[str, Any]:
    if isinstance(decision, Ack):
        return {
            "state": "succeeded",
            "result": outcome.value if isinstance(outcome, Success) else None,
        }
    if isinstance(decision, Cancel):
        if decision.state == "dropped":
            return {
                "state": "dropped",
                "reason": decision.reason,
                "result": {"kept": decision.kept},
            }
        return {"state": "cancelled", "reason": "cancelled"}
    error = _error(outcome, decision)
    if isinstance(decision, Nak):
        return {"state": "failed", "error": error}
    assert isinstance(decision, Dead)
    return {"state": "dead", "error": error, "reason": decision.reason}


def final_record(envelope: Envelope, record: ResultRecord) -> ResultRecord:
    """What a workflow's final task records when a member ends the workflow (dead or
    cancelled) before it could run: the member's verdict (state, error, reason: what the
    workflow's waiters get) under the final task's own name, queue and call as the
    workflow declared it, naming the step that ended it; no attempt of its own."""
    step = _final_step(envelope)
    own: dict[str, Any] = {"attempts": 0, "worker": "", "started_at": None, "workflow": None}
    if step is not None:
        own |= {"task": step.task, "queue": step.queue, "args": step.args, "kwargs": step.kwargs}
    return record.model_copy(update={**own, "enqueued_at": None, "failed_step": envelope.id})


def _final_step(envelope: Envelope) -> Step | None:
    flow = envelope.workflow
    if isinstance(flow, ChainState) and flow.rest:
        return flow.rest[-1]
    if isinstance(flow, ChordState):
        return flow.callback
    return None


def _call(job: Job) -> dict[str, Any]:
    envelope = job.envelope
    assert envelope is not None
    ctx = job.context
    kept = len(job.delivery.data) <= CALL_KEPT
    return {
        "task": envelope.task,
        "attempts": job.attempt,
        "queue": job.queue,
        "worker": _WORKER,
        "started_at": stamp(ctx.started) if ctx is not None else None,
        "args": envelope.args if kept else None,
        "kwargs": envelope.kwargs if kept else None,
        "enqueued_at": envelope.enqueued_at,
        "workflow": final_id(envelope.workflow, envelope.id) if envelope.workflow else None,
    }


def _error(outcome: Outcome | None, decision: Decision) -> dict[str, str]:
    if isinstance(outcome, Failure):
        error = outcome.error
        trace = outcome.traceback or "".join(
            traceback.format_exception(type(error), error, error.__traceback__)
        )
        return {"type": type(error).__name__, "message": str(error), "traceback": trace}
    detail = decision.detail if isinstance(decision, Dead) else ""
    return {"type": "", "message": detail, "traceback": ""}


def interrupted_fields(job: Job) -> dict[str, Any]:
    """The record of an attempt a worker stopping past its grace period interrupted (it
    runs again, and this attempt does not count: workers/handback.py)."""
    why = "the worker stopped past its grace period while it ran; it runs again"
    return _call(job) | {
        "state": "interrupted",
        "error": {"type": "Interrupted", "message": why, "traceback": ""},
    }
