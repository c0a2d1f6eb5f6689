"""Chains, groups and chords in the runs list (`taskq workflows ls`, the dashboard's
`/workflows`): a summary each in the runs bucket, of kind `chain`, `group` or `chord`,
written by the workers that settle its tasks (a producer may not write the bucket).

* made `running` when its first task settles (a chain's step 0, a group's or chord's
  member 0);
* ended `succeeded` when its final task does (a chain's last step, a chord's callback), or,
  for a group, when its last member does (each member marked once,
  taskq.workflows.marks); ended `dead` or `cancelled` when any of its tasks is
  dead-lettered or cancelled (it cannot complete then);
* expires `results_ttl` after its last change (a per-message TTL), as its records do.

It is written only where the bucket holds no durable run's summary under that id and
never over an ended state; durable runs' code reads durable runs' summaries alone
(`store.parse_summary`). It is a view: where it cannot be written (no bucket, no right,
no TTLs on the bucket), the canvas goes unlisted, logged at debug level.
"""

from __future__ import annotations

import logging

from taskq.client import Client
from taskq.errors import TaskqError
from taskq.policy import Ack, Cancel, Dead, Decision
from taskq.records.clock import now_iso
from taskq.records.envelope import Envelope
from taskq.workflows.marks import marks_of
from taskq.workflows.state import CallbackState, ChainState, ChordState, GroupState
from taskq.workflows.store import FINAL, RunSummary, ensure_runs, update_summary

log = logging.getLogger("taskq.worker")
Canvas = ChainState | GroupState | ChordState | CallbackState


async def note_settled(client: Client, envelope: Envelope, decision: Decision) -> None:
    """A task of a chain, group or chord settled for good: its summary, if that changed."""
    flow = envelope.workflow
    if not isinstance(flow, Canvas):
        return
    try:
        state = await _state_after(client, flow, envelope.id, decision)
        if state is not None:
            await _write(client, flow, envelope, state)
    except TaskqError as exc:
        log.debug("workflow %s not listed: %s", flow.id, exc)


async def _state_after(
    client: Client, flow: Canvas, task_id: str, decision: Decision
) -> str | None:
    """The canvas's state this settle tells (None: nothing new to write)."""
    if isinstance(decision, Dead):
        return "dead"
    if isinstance(decision, Cancel):
        return "cancelled"
    if not isinstance(decision, Ack):
        return None
    if isinstance(flow, CallbackState) or (isinstance(flow, ChainState) and flow.final == task_id):
        return "succeeded"
    if isinstance(flow, GroupState) and await _group_done(client, flow):
        return "succeeded"
    first = flow.step if isinstance(flow, ChainState) else flow.index
    return "running" if first == 0 else None


async def _group_done(client: Client, flow: GroupState) -> bool:
    """Count this member done (once, however often it settles), and tell whether all are
    (taskq.workflows.marks)."""
    return await marks_of(client, flow).settle(None)


async def _write(client: Client, flow: Canvas, envelope: Envelope, state: str) -> None:
    """Set the summary's state: made if absent, left alone when it is a durable run's, of
    another kind, or ended."""
    kind = "chord" if isinstance(flow, CallbackState) else flow.kind

    def change(current: RunSummary | None) -> RunSummary | None:
        if current is not None and (current.state in FINAL or current.state == state):
            return None
        summary = current or RunSummary(
            id=flow.id,
            name=kind,
            queue=envelope.queue or "",
            kind=kind,
            started_at=envelope.enqueued_at or now_iso(),
        )
        return summary.model_copy(update={"state": state})

    await ensure_runs(client)
    await update_summary(client, flow.id, change, kind, ttl=client.settings.results_ttl)
