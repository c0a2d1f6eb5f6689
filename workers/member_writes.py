"""What a workflow member's verdict writes besides its own record, before its message
settles: a chain, group or chord member its workflow's next step, or, ended dead or
cancelled, the workflow's visible end (its final task's record); its canvas summary; a
durable workflow's step its outcome into its run's journal. Only a delivery whose envelope
carries workflow state comes here (a plain task's writes never import a workflow module).
"""

from __future__ import annotations

from typing import Any

from taskq.client import Client
from taskq.policy import Ack, Cancel, Dead, Decision, Outcome, Success
from taskq.records.envelope import Envelope
from taskq.records.results import ResultRecord
from taskq.records.results import store as store_result
from taskq.workflows.canvas import advance
from taskq.workflows.canvas_runs import note_settled
from taskq.workflows.state import ChainState, ChordState, RunStepState, Step, final_id
from taskq.workflows.steps import step_ended


async def member_writes(
    client: Client,
    envelope: Envelope,
    decision: Decision,
    outcome: Outcome | None,
    record: ResultRecord | None,
) -> None:
    """The member's workflow writes; `record`: its own result record when it ended dead
    or cancelled (what the workflow's final task then reports)."""
    assert envelope.workflow is not None
    final = final_id(envelope.workflow, envelope.id)
    if isinstance(decision, Ack) and isinstance(outcome, Success):
        await advance(client, envelope, outcome.value)  # before the ack
    elif isinstance(decision, Dead | Cancel) and final and record is not None:
        # the workflow ends visibly: its final task reports this member's error/cancel
        await store_result(client, final, final_record(envelope, record))
    if isinstance(envelope.workflow, RunStepState):
        # into its run's journal (the step's lease kept while a full store refuses it)
        await step_ended(client, envelope, decision, outcome)
    else:
        await note_settled(client, envelope, decision)  # a chain's, group's or chord's summary


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
