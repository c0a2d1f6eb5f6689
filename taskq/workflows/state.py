"""Typed workflow state carried in a task envelope's `flow` field
(docs/results-workflows-schedules.md).

On the wire `flow` is a JSON object whose `kind` says which workflow the task belongs to;
it is validated with pydantic when a message is decoded, so a malformed flow is a decode
error (dead-lettered as `undecodable`) rather than a KeyError deep inside the worker.
"""

from __future__ import annotations

import hashlib
import re
import secrets
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

# built when first used (a message with a `flow`), not at import: every process that
# imports taskq would otherwise pay for these schemas (~50 ms), plain tasks never use them
_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True)
MAX_MEMBERS = 100_000  # a group's or chord's members, a chain's steps: bounded work per step
# Ids a workflow makes (`<flow id>`, `<flow id>.<n>`, `<flow id>.cb`): its bookkeeping keys
# and subjects are built from them, so a message may carry nothing else there.
WorkflowId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
StepId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}\.[a-z0-9]{1,24}$")]
TaskName = Annotated[str, AfterValidator(check_task)]
QueueName = Annotated[str, AfterValidator(check_queue)]
Count = Annotated[int, Field(ge=0, le=MAX_MEMBERS)]
SECRET = re.compile(r"[0-9a-f]{32}")  # a run's or chord's secret: 128 random bits
Secret = Annotated[str, StringConstraints(pattern=rf"^{SECRET.pattern}$")]
# where a group's or chord's marks are (taskq.workflows.marks): the workflows stream; absent
# in what an earlier taskq enqueued, whose marks are in the FLOWS bucket
Store = Literal["journal"]


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
    store: Store | None = None

    @model_validator(mode="after")
    def _member_of_it(self) -> GroupState:
        if self.index is not None and self.size is not None and self.index >= self.size:
            raise ValueError(f"member {self.index} of a group of {self.size}")
        return self


class ChordState(BaseModel):
    """A member of a chord's header: the last of `size` members publishes `callback`.

    `token` is the chord's secret (random, carried only in its members' messages, which
    producers cannot read): its members' results are stored under a digest of it and its
    callback's id holds another, so a message naming the chord's id without its token
    (anyone can list chord ids) is a chord of its own, never a member of this one."""

    model_config = _FROZEN

    kind: Literal["chord"] = "chord"
    id: WorkflowId
    size: Annotated[int, Field(ge=1, le=MAX_MEMBERS)]
    final: StepId  # the callback's id
    callback: Step
    index: Count | None = None
    token: Secret | None = None
    store: Store | None = None

    @model_validator(mode="after")
    def _member_of_it(self) -> ChordState:
        if self.index is not None and self.index >= self.size:
            raise ValueError(f"member {self.index} of a chord of {self.size}")
        if self.store is not None and self.token is None:
            raise ValueError("a chord's marks in the workflows stream need its token")
        if self.token is not None and self.final != chord_final(self.id, self.token):
            raise ValueError("a chord's callback id is not the one its token gives")
        return self

    @property
    def members(self) -> str:
        """Where its members' results are kept in the flows bucket (`<members>.r.<i>`)."""
        return self.id if self.token is None else f"{self.id}.{self.secret_digest}"

    @property
    def secret_digest(self) -> str:
        """A digest of its token: in its members' marks' names (taskq.workflows.marks)."""
        return _digest("members", self.token) if self.token is not None else ""


def chord_final(flow_id: str, token: str) -> str:
    """A chord's callback id: `<chord id>.cb<digest of its token>` (unguessable)."""
    return f"{flow_id}.cb{_digest('callback', token)}"


def _digest(what: str, token: str) -> str:
    return hashlib.sha256(f"{what}:{token}".encode()).hexdigest()[:16]


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
    # the run's secret (its start's, which only workers read): the ids of the messages its
    # workers publish for it (its decisions, its steps) hold digests of it, so no one can
    # take such an id first and have the server drop the real message as a duplicate
    tag: Secret | None = None

    def digest(self, what: str) -> str:
        """An id part for `what`: a digest of the run's secret, or random without one."""
        return _digest(what, self.tag) if self.tag else secrets.token_hex(8)


def child_secret(secret: str | None, child_id: str) -> str:
    """A child run's secret: its parent's decisions know it (they cancel it)."""
    if secret is None:
        return secrets.token_hex(16)
    return hashlib.sha256(f"child:{secret}:{child_id}".encode()).hexdigest()[:32]


WorkflowState = Annotated[
    ChainState | GroupState | ChordState | CallbackState | RunStepState,
    Field(discriminator="kind"),
]
WORKFLOW_STATE: TypeAdapter[WorkflowState] = TypeAdapter(
    WorkflowState, config=ConfigDict(defer_build=True)
)


def state_to_wire(flow: WorkflowState) -> dict[str, Any]:
    """The JSON object for the envelope (no null `index` outside group and chord members)."""
    return flow.model_dump(mode="json", exclude_none=True)


def final_id(flow: WorkflowState | None, task_id: str) -> str | None:
    """The id of the task whose result is the workflow's result (None outside workflows, or
    when `task_id` is that task)."""
    final = getattr(flow, "final", None)
    return str(final) if final and final != task_id else None
