"""Typed workflow state carried in a task envelope's `flow` field (DESIGN §7).

On the wire `flow` is a JSON object whose `kind` says which workflow the task belongs to;
it is validated with pydantic when a message is decoded, so a malformed flow is a decode
error (dead-lettered as `undecodable`) rather than a KeyError deep inside the worker.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Step(BaseModel):
    """A task still to be published by a workflow: a chain's next step, a chord's callback."""

    model_config = _FROZEN

    task: str
    queue: str
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


class ChainFlow(BaseModel):
    """A chain step: `rest` runs after it, each step getting the previous result first."""

    model_config = _FROZEN

    kind: Literal["chain"] = "chain"
    id: str
    step: int
    final: str  # the id of the last step, whose result is the chain's
    rest: tuple[Step, ...] = ()


class GroupFlow(BaseModel):
    """A member of a group (`index`: its place in the group's results)."""

    model_config = _FROZEN

    kind: Literal["group"] = "group"
    id: str
    index: int | None = None


class ChordFlow(BaseModel):
    """A member of a chord's header: the last of `size` members publishes `callback`."""

    model_config = _FROZEN

    kind: Literal["chord"] = "chord"
    id: str
    size: int
    final: str  # the callback's id
    callback: Step
    index: int | None = None


class CallbackFlow(BaseModel):
    """A chord's callback."""

    model_config = _FROZEN

    kind: Literal["callback"] = "callback"
    id: str


Flow = Annotated[ChainFlow | GroupFlow | ChordFlow | CallbackFlow, Field(discriminator="kind")]
FLOW: TypeAdapter[Flow] = TypeAdapter(Flow)


def flow_to_wire(flow: Flow) -> dict[str, Any]:
    """The JSON object for the envelope (no null `index` outside group and chord members)."""
    return flow.model_dump(mode="json", exclude_none=True)


def final_id(flow: Flow | None, task_id: str) -> str | None:
    """The id of the task whose result is the workflow's result (None outside workflows, or
    when `task_id` is that task)."""
    final = getattr(flow, "final", None)
    return str(final) if final and final != task_id else None
