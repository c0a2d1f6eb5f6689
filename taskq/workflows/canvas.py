"""Workflows: chain, group and chord of task signatures (docs/results-workflows-schedules.md).

Every step's task id is fixed when the workflow is enqueued (`<flow id>.<n>`), so a
workflow's handle is known at once and every follow-up publish is deduplicated by the
server (`Nats-Msg-Id` = the step's id): a redelivered step cannot enqueue its successor twice.

* chain: each step carries the rest of the chain in its envelope's `flow`; on success the
  worker publishes the next step with the result prepended to its arguments.
* group: members run independently; the group handle gathers their results in order.
* chord: each member, on success, stores its result as a mark of its own, written once
  (taskq.workflows.marks: in the workflows stream, beside durable runs' journals), then
  counts the chord's marks; whoever stores the last one publishes the callback under the
  id `<chord id>.cb<digest>`. The marks' subjects and the id hold digests of the chord's
  secret token (taskq.workflows.state.ChordState), so no message naming the chord without
  its token can be counted as a member. A member redelivered after recording finds its
  mark present and can only re-publish the same (deduplicated) callback, so the callback
  runs exactly once.
A failed member or step marks the workflow's final task `dead` with that error, so waiters
get a TaskFailed; its dead letter names the workflow in `message.flow`.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, replace
from typing import Any

from taskq.client import Client
from taskq.errors import ConfigError
from taskq.handle import TaskHandle
from taskq.ids import new_id
from taskq.records.clock import now_iso
from taskq.records.envelope import Envelope
from taskq.task import CallOptions, Signature
from taskq.workflows.marks import marks_of, store_for_new
from taskq.workflows.state import (
    CallbackState,
    ChainState,
    ChordState,
    GroupState,
    Step,
    WorkflowState,
    chord_final,
)

__all__ = ["GroupHandle", "Signature", "advance", "chain", "chord", "group"]
WAITING = 16  # a group's members whose results `GroupHandle.result` waits on at once


def step_of(sig: Signature) -> Step:
    return Step(
        task=sig.task.name, queue=sig.task.queue, args=list(sig.args), kwargs=dict(sig.kwargs)
    )


@dataclass(frozen=True)
class GroupHandle:
    """Handles of a group's members; `result()` is the list of their results, in order."""

    id: str
    members: tuple[TaskHandle, ...]

    async def result(self, timeout: float | None = None) -> list[Any]:
        """Waits on `WAITING` members at a time, in order, within one deadline. Each
        waiting member re-reads its record on a backoff: 10,000 at once slowed their own
        group of no-op tasks from 11 s to 160 s here; 16 at a time it returned in 16 s
        (64: 18 s, 256: 26 s)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        room = asyncio.Semaphore(WAITING)

        async def one(member: TaskHandle) -> Any:
            async with room:
                left = None if deadline is None else max(0.001, deadline - loop.time())
                return await member.result(left)

        return list(await asyncio.gather(*(one(m) for m in self.members)))

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
        flow = ChainState(id=flow_id, step=0, final=final, rest=tuple(step_of(s) for s in rest))
        await _publish(first, f"{flow_id}.0", flow)
        last = self.steps[-1].task
        return TaskHandle(final, last.name, last.queue, 0, False, first.task.app)


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
        store = await store_for_new(await self.members[0].task.app.client())
        flow = GroupState(id=flow_id, size=len(self.members), store=store)
        handles = await _publish_members(self.members, flow_id, flow)
        return GroupHandle(flow_id, tuple(handles))


@dataclass(frozen=True)
class chord:
    """Run a group, then `callback` once with the list of the members' results."""

    header: group
    callback: Signature

    async def enqueue(self) -> TaskHandle:
        flow_id, token = new_id(), secrets.token_hex(16)
        final = chord_final(flow_id, token)
        app = self.callback.task.app
        flow = ChordState(
            id=flow_id,
            size=len(self.header.members),
            final=final,
            callback=step_of(self.callback),
            token=token,
            store=await store_for_new(await app.client()),
        )
        await _publish_members(self.header.members, flow_id, flow)
        return TaskHandle(final, self.callback.task.name, self.callback.task.queue, 0, False, app)


async def _publish_members(
    members: tuple[Signature, ...], flow_id: str, flow: GroupState | ChordState
) -> list[TaskHandle]:
    """Publish every member, many in flight at once (each under its own fixed id), once
    every member's message is known to encode: a member refused at the call (its
    arguments) leaves none of the others published."""
    staged = [
        (m, _envelope(m, f"{flow_id}.{i}", flow.model_copy(update={"index": i})))
        for i, m in enumerate(members)
    ]
    for _, envelope in staged:
        envelope.encode()  # ArgumentsError here, before anything is sent
    handles: list[TaskHandle] = []
    for start in range(0, len(staged), 256):
        batch = staged[start : start + 256]
        handles += await asyncio.gather(*(m.task.send(e, m.task.queue) for m, e in batch))
    return handles


def _envelope(sig: Signature, task_id: str, flow: WorkflowState) -> Envelope:
    task = sig.task
    envelope = task.build_envelope(list(sig.args), dict(sig.kwargs), CallOptions(key=task_id))
    return replace(envelope, workflow=flow)


async def _publish(sig: Signature, task_id: str, flow: WorkflowState) -> TaskHandle:
    return await sig.task.send(_envelope(sig, task_id, flow), sig.task.queue)


# -- worker side ------------------------------------------------------------------------------
async def advance(client: Client, envelope: Envelope, value: Any) -> None:
    """After a workflow step succeeded (before its ack): move the workflow on."""
    flow = envelope.workflow
    if isinstance(flow, ChainState) and flow.rest:
        await _next_in_chain(client, flow, value)
    elif isinstance(flow, ChordState):
        await _record_member(client, flow, value)


async def _next_in_chain(client: Client, flow: ChainState, value: Any) -> None:
    nxt, step = flow.rest[0], flow.step + 1
    envelope = Envelope(
        id=f"{flow.id}.{step}",
        task=nxt.task,
        args=[value, *nxt.args],
        kwargs=dict(nxt.kwargs),
        enqueued_at=now_iso(),
        workflow=flow.model_copy(update={"step": step, "rest": flow.rest[1:]}),
    )
    await client.publish_envelope(envelope, nxt.queue)


async def _record_member(client: Client, flow: ChordState, value: Any) -> None:
    """Record this member's result (once, taskq.workflows.marks), then, if every member's
    is recorded, publish the callback. Whoever records the last one sees the full count;
    a redelivered member can only re-publish the deduplicated callback."""
    if await marks_of(client, flow).settle(value):
        await _callback_once(client, flow)


async def _callback_once(client: Client, flow: ChordState) -> None:
    """Publish the callback, once per client however many of its members see the full
    count: the last members settle together (up to the worker's concurrency), and each
    gathering every member's result was measured to delay the callback by seconds (64
    gatherers of a 1,000-member chord). Each caller still awaits the publish (its member is
    acknowledged only after it); a failure reaches them all, and their redeliveries retry."""
    pending = client.cached("chord callbacks", dict)
    publishing = pending.get(flow.members)
    if publishing is None:
        publishing = pending[flow.members] = asyncio.ensure_future(_publish_callback(client, flow))
        publishing.add_done_callback(lambda _: pending.pop(flow.members, None))
    await asyncio.shield(publishing)


async def _publish_callback(client: Client, flow: ChordState) -> None:
    results = await marks_of(client, flow).results()
    callback = flow.callback
    envelope = Envelope(
        id=flow.final,
        task=callback.task,
        args=[results, *callback.args],
        kwargs=dict(callback.kwargs),
        enqueued_at=now_iso(),
        workflow=CallbackState(id=flow.id),
    )
    await client.publish_envelope(envelope, callback.queue)  # dedup: one callback, ever
