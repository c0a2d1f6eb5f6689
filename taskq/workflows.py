"""Workflows: chain, group and chord of task signatures (DESIGN §7).

Every step's task id is fixed when the workflow is enqueued (`<flow id>.<n>`), so a
workflow's handle is known at once and every follow-up publish is deduplicated by the
server (`Nats-Msg-Id` = the step's id): a redelivered step cannot enqueue its successor twice.

* chain: each step carries the rest of the chain in its envelope's `flow`; on success the
  worker publishes the next step with the result prepended to its arguments.
* group: members run independently; the group handle gathers their results in order.
* chord: each member, on success, stores its result in the FLOWS bucket under its own key
  with compare-and-set (create-only), then counts the chord's keys; whoever stores the last
  one publishes the callback under the deterministic id `<chord id>.cb`. A member
  redelivered after recording finds its key present and can only re-publish the same
  (deduplicated) callback, so the callback runs exactly once.
A failed member or step marks the workflow's final task `dead` with that error, so waiters
get a TaskFailed; its dead letter names the workflow in `message.flow`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from taskq.envelope import Envelope, now_iso
from taskq.errors import ConfigError
from taskq.handle import TaskHandle
from taskq.ids import new_id
from taskq.retrying import retry_transient
from taskq.task import CallOptions

if TYPE_CHECKING:
    from taskq.app import App
    from taskq.jetstream import Broker
    from taskq.task import Task


@dataclass(frozen=True)
class Signature:
    """A task with arguments, not yet enqueued: `task.s(*args, **kwargs)`."""

    task: Task[Any, Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            "task": self.task.name,
            "queue": self.task.queue,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
        }


@dataclass(frozen=True)
class GroupHandle:
    """Handles of a group's members; `result()` is the list of their results, in order."""

    id: str
    members: tuple[TaskHandle, ...]

    async def result(self, timeout: float | None = None) -> list[Any]:
        return list(await asyncio.gather(*(m.result(timeout) for m in self.members)))

    def result_sync(self, timeout: float | None = None) -> list[Any]:
        app = self.members[0].app if self.members else None
        if app is None:
            return []
        return app.portal.run(self.result(timeout))


@dataclass(frozen=True)
class chain:
    """Run signatures one after another, each getting the previous result first."""

    steps: tuple[Signature, ...]

    def __init__(self, *steps: Signature) -> None:
        if not steps:
            raise ConfigError("a chain needs at least one signature")
        object.__setattr__(self, "steps", tuple(steps))

    async def enqueue(self) -> TaskHandle:
        flow_id = new_id()
        first, rest = self.steps[0], self.steps[1:]
        final = f"{flow_id}.{len(self.steps) - 1}"
        flow = {
            "id": flow_id,
            "kind": "chain",
            "step": 0,
            "final": final,
            "rest": [s.to_wire() for s in rest],
        }
        await _publish(first, f"{flow_id}.0", flow)
        app = first.task.app
        last = self.steps[-1].task
        return TaskHandle(final, last.name, last.queue, 0, False, app)


@dataclass(frozen=True)
class group:
    """Run signatures in parallel; the result is the list of their results."""

    members: tuple[Signature, ...]

    def __init__(self, *members: Signature) -> None:
        if not members:
            raise ConfigError("a group needs at least one signature")
        object.__setattr__(self, "members", tuple(members))

    async def enqueue(self) -> GroupHandle:
        flow_id = new_id()
        handles = await _publish_members(self.members, flow_id, {"id": flow_id, "kind": "group"})
        return GroupHandle(flow_id, tuple(handles))


@dataclass(frozen=True)
class chord:
    """Run a group, then `callback` once with the list of the members' results."""

    header: group
    callback: Signature

    async def enqueue(self) -> TaskHandle:
        flow_id = new_id()
        size = len(self.header.members)
        final = f"{flow_id}.cb"
        flow = {
            "id": flow_id,
            "kind": "chord",
            "size": size,
            "final": final,
            "callback": self.callback.to_wire(),
        }
        app = self.callback.task.app
        await ensure_flows(app, await app.broker())
        await _publish_members(self.header.members, flow_id, flow)
        return TaskHandle(final, self.callback.task.name, self.callback.task.queue, 0, False, app)


async def _publish_members(
    members: tuple[Signature, ...], flow_id: str, flow: dict[str, Any]
) -> list[TaskHandle]:
    """Publish every member, many in flight at once (each under its own fixed id)."""
    handles: list[TaskHandle] = []
    for start in range(0, len(members), 256):
        batch = members[start : start + 256]
        handles += await asyncio.gather(
            *(
                _publish(m, f"{flow_id}.{start + i}", {**flow, "index": start + i})
                for i, m in enumerate(batch)
            )
        )
    return handles


async def _publish(sig: Signature, task_id: str, flow: dict[str, Any]) -> TaskHandle:
    app = sig.task.app
    envelope = app.build_envelope(
        sig.task, list(sig.args), dict(sig.kwargs), CallOptions(key=task_id)
    )
    envelope = Envelope(**{**envelope.__dict__, "flow": flow})
    return await app.publish_envelope(envelope, sig.task.queue)


# -- worker side ------------------------------------------------------------------------------
async def ensure_flows(app: App, broker: Broker) -> None:
    from taskq.topology import flows_bucket

    spec = flows_bucket(app.names, app.settings)
    await retry_transient(lambda: broker.ensure_bucket(spec), what="flows bucket set-up")


async def advance(app: App, broker: Broker, envelope: Envelope, value: Any) -> None:
    """After a workflow step succeeded (before its ack): move the workflow on."""
    flow = envelope.flow or {}
    if flow.get("kind") == "chain" and flow.get("rest"):
        await _next_in_chain(app, flow, value)
    elif flow.get("kind") == "chord":
        await _record_member(app, broker, flow, value)


async def _next_in_chain(app: App, flow: dict[str, Any], value: Any) -> None:
    nxt, rest = flow["rest"][0], flow["rest"][1:]
    step = int(flow["step"]) + 1
    envelope = Envelope(
        id=f"{flow['id']}.{step}",
        task=nxt["task"],
        args=[value, *nxt["args"]],
        kwargs=nxt["kwargs"],
        enqueued_at=now_iso(),
        flow={**flow, "step": step, "rest": rest},
    )
    await app.publish_envelope(envelope, nxt["queue"])


async def _record_member(app: App, broker: Broker, flow: dict[str, Any], value: Any) -> None:
    """Record this member's result (create-only: a compare-and-set on a fresh key), then,
    if every member's key exists, publish the callback. Whoever stores the last key sees
    the full count; a redelivered member can only re-publish the deduplicated callback."""
    bucket, chord_id, index = app.names.flows_bucket, str(flow["id"]), int(flow["index"])
    await ensure_flows(app, broker)
    await broker.kv_create(bucket, f"{chord_id}.r.{index}", to_json(value, fallback=repr))
    state = await broker.stream_state(
        f"KV_{bucket}", subjects_filter=f"$KV.{bucket}.{chord_id}.r.*"
    )
    if len(state.subjects) >= int(flow["size"]):
        await _publish_callback(app, broker, flow)


async def _publish_callback(app: App, broker: Broker, flow: dict[str, Any]) -> None:
    import json

    bucket, chord_id, size = app.names.flows_bucket, str(flow["id"]), int(flow["size"])
    found = await asyncio.gather(
        *(broker.kv_get(bucket, f"{chord_id}.r.{index}") for index in range(size))
    )
    results = [json.loads(item[0]) if item else None for item in found]
    callback = flow["callback"]
    envelope = Envelope(
        id=str(flow["final"]),
        task=callback["task"],
        args=[results, *callback["args"]],
        kwargs=callback["kwargs"],
        enqueued_at=now_iso(),
        flow={"id": chord_id, "kind": "callback"},
    )
    await app.publish_envelope(envelope, callback["queue"])  # dedup: one callback, ever


def final_id(envelope: Envelope) -> str | None:
    """The id of the task whose result is the workflow's result (None outside workflows)."""
    flow = envelope.flow or {}
    final = flow.get("final")
    return str(final) if final and final != envelope.id else None
