"""A chain's, group's or chord's tasks and their states, by its id or any of its tasks'
ids, and `show`: every workflow as one view (`RunView`: a durable run's, else a canvas's,
its tasks as steps), for `taskq workflows show` and the dashboard's `/workflows/<id>`.

Like a task's story, nothing is written for it: every step's id is `<workflow id>.<n>` (a
chord's callback `<workflow id>.cb<digest>`), so the results bucket's keys under
`<workflow id>.` are the steps that ran or failed; the queue streams hold the steps still
waiting (their envelopes carry the workflow's shape: a chain's remaining steps, a chord's
size and callback); the heartbeats name the running ones. A chain's steps not enqueued yet
are listed as `pending` when a waiting step's envelope names them. Its summary (start,
last change) is the one its workers keep in the runs bucket.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from taskq.client import Client, ClientSource
from taskq.errors import NotFound
from taskq.operate.locate import waiting_with_prefix
from taskq.records.heartbeats import list_workers
from taskq.records.results import ensure_results, fetch
from taskq.workflows.state import CallbackState, ChainState, ChordState, GroupState, WorkflowState
from taskq.workflows.store import RunSummary, load_summary
from taskq.workflows.views import RunView, StepView, show_run

CALLBACK = re.compile(r"cb([0-9a-f]{16})?")  # a chord's callback: `<flow>.cb<digest>`


def is_callback(step_id: str) -> bool:
    """Whether `step_id` is a chord's callback's id (`<flow>.cb`, an earlier taskq's)."""
    return CALLBACK.fullmatch(step_id.rpartition(".")[2]) is not None


@dataclass
class WorkflowStep:
    """One task of a workflow: `role` is `step` (chain), `member` or `callback` (chord)."""

    id: str
    task: str = ""
    queue: str = ""
    state: str = "pending"  # not enqueued yet; else queued, running, or a task's state
    role: str = "step"


@dataclass
class WorkflowStory:
    """A workflow: its kind (chain, group, chord), its final task and every step."""

    id: str
    kind: str
    final: str | None
    state: str
    steps: list[WorkflowStep] = field(default_factory=list)


def workflow_id_of(ref: str) -> str:
    """The workflow id in `ref`, which is that id or one of its steps' ids."""
    head, dot, tail = ref.rpartition(".")
    return head if dot and (tail.isdigit() or CALLBACK.fullmatch(tail)) else ref


async def workflow_story(source: ClientSource, ref: str) -> WorkflowStory | None:
    """The workflow that `ref` (its id or a step's id) names; None when nothing knows it."""
    client = await source.client()
    flow = workflow_id_of(ref)
    steps: dict[str, WorkflowStep] = {}
    finals = await _from_results(client, flow, steps)
    shapes = await _from_queues(client, flow, steps)
    for worker in await list_workers(client):
        for running in worker.running:
            if running.id in steps and steps[running.id].state == "queued":
                steps[running.id].state = "running"
    if not steps:
        return None
    kind, final = _shape(flow, steps, shapes, finals)
    _add_pending(flow, steps, shapes)
    ordered = sorted(steps.values(), key=lambda s: _index(flow, s.id))
    for step in ordered:
        step.role = "step" if kind == "chain" else "member"
        step.role = "callback" if is_callback(step.id) else step.role
    return WorkflowStory(flow, kind, final, _overall(final, ordered, steps), ordered)


async def show(client: Client, ref: str) -> RunView:
    """What `taskq workflows show` and the dashboard's `/workflows/<ref>` show, one view of
    every kind: the durable run `ref`; else the chain, group or chord that `ref` (its id or
    a task's) names, its tasks as steps; else NotFound."""
    try:
        return await show_run(client, ref)
    except NotFound:
        view = await canvas_view(client, ref)
        if view is None:
            raise
        return view


async def canvas_view(client: Client, ref: str) -> RunView | None:
    """The chain, group or chord `ref` names, as every workflow is shown (a `RunView`): its
    summary (state as its tasks tell it now), its tasks as steps; None when nothing knows
    it."""
    story = await workflow_story(client, ref)
    if story is None:
        return None
    kept = await load_summary(client, story.id, any_kind=True)
    first_queue = next((step.queue for step in story.steps if step.queue), "")
    summary = RunSummary(
        id=story.id,
        name=story.kind,
        queue=kept.queue if kept is not None and kept.queue else first_queue,
        state=story.state,
        started_at=kept.started_at if kept is not None else "",
        updated_at=kept.updated_at if kept is not None else "",
        error=kept.error if kept is not None else None,
        kind=story.kind,
    )
    steps = [
        StepView(n, "run", s.task, s.id, s.state, queue=s.queue, role=s.role)
        for n, s in enumerate(story.steps)
    ]
    return RunView(summary, steps, final=story.final)


async def _from_results(client: Client, flow: str, steps: dict[str, WorkflowStep]) -> set[str]:
    """Steps with a result record; returns the final ids those records name."""
    await ensure_results(client)
    keys = []
    for bucket in await client.results.existing():  # a flow's members hash to any of them
        keys += await client.connection.kv.keys(bucket, f"{flow}.*")
    keys = sorted(set(keys))
    records = await asyncio.gather(*(fetch(client, key) for key in keys))
    finals: set[str] = set()
    for key, record in zip(keys, records, strict=True):
        if record is not None:
            steps[key] = WorkflowStep(key, record.task, record.queue, record.state)
            finals.update([record.workflow] if record.workflow else [])
    return finals


async def _from_queues(
    client: Client, flow: str, steps: dict[str, WorkflowStep]
) -> list[WorkflowState]:
    """Steps waiting in a queue (unless a record says more); returns their flows."""
    shapes: list[WorkflowState] = []
    for waiting in await waiting_with_prefix(client, f"{flow}."):
        envelope = waiting.envelope
        if envelope is None:
            continue
        if envelope.workflow is not None:
            shapes.append(envelope.workflow)
        if envelope.id not in steps or steps[envelope.id].state == "failed":
            state = "queued" if envelope.id not in steps else "failed"
            steps[envelope.id] = WorkflowStep(envelope.id, envelope.task, waiting.queue, state)
    return shapes


def _shape(
    flow: str, steps: dict[str, WorkflowStep], shapes: list[WorkflowState], finals: set[str]
) -> tuple[str, str | None]:
    """The workflow's kind and final task id, from an envelope's flow or the records."""
    for shape in shapes:
        if isinstance(shape, ChainState):
            return "chain", shape.final
        if isinstance(shape, ChordState):
            return "chord", shape.final
        if isinstance(shape, GroupState):
            return "group", None
    callbacks = sorted(f for f in [*steps, *finals] if is_callback(f))
    if callbacks or any(isinstance(shape, CallbackState) for shape in shapes):
        return "chord", callbacks[0] if callbacks else None
    if finals:
        return "chain", sorted(finals)[0]
    return "group", None


def _add_pending(flow: str, steps: dict[str, WorkflowStep], shapes: list[WorkflowState]) -> None:
    """A chain's steps not enqueued yet and a chord's callback, as their flows name them."""
    for shape in shapes:
        if isinstance(shape, ChainState):
            for offset, step in enumerate(shape.rest, start=shape.step + 1):
                steps.setdefault(f"{flow}.{offset}", WorkflowStep(f"{flow}.{offset}", step.task))
        elif isinstance(shape, ChordState):
            steps.setdefault(shape.final, WorkflowStep(shape.final, shape.callback.task))


def _index(flow: str, step_id: str) -> int:
    tail = step_id[len(flow) + 1 :]
    return int(tail) if tail.isdigit() else 1 << 30


def _overall(final: str | None, ordered: list[WorkflowStep], steps: dict[str, WorkflowStep]) -> str:
    """The workflow's state: its final task's, else what its members say together."""
    states = {s.state for s in ordered}
    if final is not None and final in steps and steps[final].state != "pending":
        return steps[final].state
    for decisive in ("dead", "cancelled"):
        if decisive in states:
            return decisive
    if states == {"succeeded"}:
        return "succeeded"
    return "running" if states & {"running", "succeeded", "failed"} else "queued"
