"""Typed workflow state carried in a task envelope's `flow` field
(docs/results-workflows-schedules.md).

On the wire `flow` is a JSON object whose `kind` says which workflow the task belongs to;
it is validated with pydantic when a message is decoded, so a malformed flow is a decode
error (dead-lettered as `undecodable`) rather than a KeyError deep inside the worker.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    model_validator,
)

from taskq.topology.names import check_queue, check_task

_FROZEN = ConfigDict(frozen=True, extra="forbid")
MAX_MEMBERS = 100_000  # a group's or chord's members, a chain's steps: bounded work per step
# Ids a workflow makes (`<flow id>`, `<flow id>.<n>`, `<flow id>.cb`): its bookkeeping keys
# and subjects are built from them, so a message may carry nothing else there.
WorkflowId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
StepId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}\.[a-z0-9]{1,8}$")]
TaskName = Annotated[str, AfterValidator(check_task)]
QueueName = Annotated[str, AfterValidator(check_queue)]
Count = Annotated[int, Field(ge=0, le=MAX_MEMBERS)]


class Step(BaseModel):
    """A task still to be published by a workflow: a chain's next step, a chord's callback."""

    model_config = _FROZEN

    task: TaskName
    queue: QueueName
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


class ChainState(BaseModel):
    """A chain step: `rest` runs after it, each step getting the previous result first."""

    model_config = _FROZEN

    kind: Literal["chain"] = "chain"
    id: WorkflowId
    step: Count
    final: StepId  # the id of the last step, whose result is the chain's
    rest: tuple[Step, ...] = Field(default=(), max_length=MAX_MEMBERS)


class GroupState(BaseModel):
    """A member of a group (`index`: its place in the group's results)."""

    model_config = _FROZEN

    kind: Literal["group"] = "group"
    id: WorkflowId
    index: Count | None = None
    size: Annotated[int, Field(ge=1, le=MAX_MEMBERS)] | None = None  # None: an earlier taskq's

    @model_validator(mode="after")
    def _member_of_it(self) -> GroupState:
        if self.index is not None and self.size is not None and self.index >= self.size:
            raise ValueError(f"member {self.index} of a group of {self.size}")
        return self


class ChordState(BaseModel):
    """A member of a chord's header: the last of `size` members publishes `callback`."""

    model_config = _FROZEN

    kind: Literal["chord"] = "chord"
    id: WorkflowId
    size: Annotated[int, Field(ge=1, le=MAX_MEMBERS)]
    final: StepId  # the callback's id
    callback: Step
    index: Count | None = None

    @model_validator(mode="after")
    def _member_of_it(self) -> ChordState:
        if self.index is not None and self.index >= self.size:
            raise ValueError(f"member {self.index} of a chord of {self.size}")
        return self


class CallbackState(BaseModel):
    """A chord's callback."""

    model_config = _FROZEN

    kind: Literal["callback"] = "callback"
    id: WorkflowId


class RunStepState(BaseModel):
    """A step of a durable workflow run: its outcome is appended to the run's journal (and
    the run's next decision published) before the step's message is acknowledged."""

    model_config = _FROZEN

    kind: Literal["run"] = "run"
    id: WorkflowId  # the run's id
    n: Count  # the step's command number in the run
    workflow: TaskName  # the workflow, whose decisions run as this task...
    queue: QueueName  # ...on this queue
    # the journal message (its round, or a chunk of it) that holds command `n`: a worker
    # checks the step against it before running it (taskq.workflows.steps)
    at: Annotated[int, Field(ge=0)] = 0


WorkflowState = Annotated[
    ChainState | GroupState | ChordState | CallbackState | RunStepState,
    Field(discriminator="kind"),
]
WORKFLOW_STATE: TypeAdapter[WorkflowState] = TypeAdapter(WorkflowState)


def state_to_wire(flow: WorkflowState) -> dict[str, Any]:
    """The JSON object for the envelope (no null `index` outside group and chord members)."""
    return flow.model_dump(mode="json", exclude_none=True)


def final_id(flow: WorkflowState | None, task_id: str) -> str | None:
    """The id of the task whose result is the workflow's result (None outside workflows, or
    when `task_id` is that task)."""
    final = getattr(flow, "final", None)
    return str(final) if final and final != task_id else None
