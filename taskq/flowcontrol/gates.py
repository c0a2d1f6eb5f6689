"""Enqueue-side flow control: `unique_for`, `debounce` and `throttle` (`task.options(...)`).

- unique: a create-only record with a TTL (ADR-43) per task and arguments (or `key`); the
  first enqueue in the window creates it and publishes, later ones find it and get the first
  task's handle. Within the stream's dedup window (2 min) a later enqueue also publishes its
  call under the first id: the server drops it as a duplicate if the first publish landed,
  and stores it if the first producer died between creating the record and publishing.
- debounce: one record per task and key holds the burst (its id, due time, last call);
  every enqueue replaces it and publishes a wake-up that workers hold until the burst is
  due, then run once with the last call's arguments (taskq.flowcontrol.debounce).
- throttle: a create-only record with the window as TTL; the first enqueue of a window
  publishes, the rest are dropped with a `dropped` result naming the kept run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from taskq.client import Client, ClientSource
from taskq.errors import ConfigError, TaskqError
from taskq.flowcontrol import debounce as bursts
from taskq.flowcontrol.keys import call_digest, token
from taskq.flowcontrol.store import ensure_limits, write_once
from taskq.handle import TaskHandle
from taskq.middleware import Chain
from taskq.nats import StoredMessage
from taskq.portal import Portal
from taskq.records.envelope import Envelope

log = logging.getLogger("taskq")
DROPPED = "Taskq-Dropped"  # on a call a throttle window dropped: why (recorded, not run)
KEPT = "Taskq-Kept"  # ...and the id of the run the window kept
Send = Callable[[Envelope], Awaitable[TaskHandle]]  # publish an envelope the usual way


class GateApp(ClientSource, Protocol):
    """What the gates need of an App."""

    @property
    def portal(self) -> Portal: ...

    @property
    def middleware(self) -> Chain: ...


@dataclass(frozen=True)
class Gate:
    """The enqueue-side options of one call (at most one of the three is set)."""

    unique_for: float | None = None
    debounce: float | None = None
    throttle: float | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        given = [(n, v) for n, v in self._options() if v is not None]
        if len(given) > 1:
            raise ConfigError(f"use one of unique_for, debounce, throttle, not {given[0][0]} too")
        for name, value in given:
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{name} must be a number of seconds > 0, not {value!r}")
            if name != "unique_for" and not self.key:
                raise ConfigError(f"{name}= needs key= (the group it applies to)")

    def _options(self) -> list[tuple[str, float | None]]:
        return [
            ("unique_for", self.unique_for),
            ("debounce", self.debounce),
            ("throttle", self.throttle),
        ]

    @property
    def active(self) -> bool:
        return self.unique_for is not None or self.debounce is not None or self.throttle is not None


async def unique(
    app: GateApp, envelope: Envelope, queue: str, gate: Gate, send: Send
) -> TaskHandle:
    """Publish unless the same call (or key) was enqueued within `gate.unique_for` seconds;
    then the first call's handle (`duplicate`), and nothing new is stored."""
    assert gate.unique_for is not None
    client = await app.client()
    stream = await ensure_limits(client)
    which = token(gate.key) if gate.key else call_digest(envelope.args, envelope.kwargs)
    subject = client.names.limit_subject("unique", which, envelope.task)
    records, mark = client.connection.records, _mark(envelope.id)
    while True:
        seq = await write_once(
            client, stream, subject, mark, lambda: records.create(subject, mark, gate.unique_for)
        )
        if seq is not None:
            return await _or_release(client, stream, seq, send(envelope))
        stored = await client.connection.messages.last(stream, subject)
        if stored is not None:  # else it expired between the two reads: try again
            return await _first(app, client, envelope, queue, stored, send)


async def _first(
    app: GateApp,
    client: Client,
    envelope: Envelope,
    queue: str,
    stored: StoredMessage,
    send: Send,
) -> TaskHandle:
    """The first call's handle. While the first publish is inside the stream's dedup
    window, publish this call again under its id: a no-op if it landed, the repair if its
    producer died between reserving and publishing."""
    first = _stored_id(stored.data) or ""
    age = (datetime.now(UTC) - (stored.time or datetime.now(UTC))).total_seconds()
    if first and age < client.settings.duplicate_window - 5:
        await send(replace(envelope, id=first))
    return TaskHandle(first, envelope.task, queue, 0, True, app)


async def throttle(
    app: GateApp, envelope: Envelope, queue: str, gate: Gate, send: Send
) -> TaskHandle:
    """Publish if this is the first call for `gate.key` in its `gate.throttle` window; else
    drop it: nothing is published and its result is `dropped` (TaskDropped)."""
    assert gate.throttle is not None and gate.key is not None
    client = await app.client()
    stream = await ensure_limits(client)
    subject = client.names.limit_subject("throttle", token(gate.key), envelope.task)
    records, mark = client.connection.records, _mark(envelope.id)
    seq = await write_once(
        client, stream, subject, mark, lambda: records.create(subject, mark, gate.throttle)
    )
    if seq is not None:
        return await _or_release(client, stream, seq, send(envelope))
    stored = await client.connection.messages.last(stream, subject)
    kept = str(json.loads(stored.data).get("id", "")) if stored is not None else ""
    reason = f"throttled: one run per {gate.throttle:g}s for key {gate.key!r}"
    # published marked dropped: a worker records it without running it (producers write
    # no results: docs/security.md)
    marked = replace(envelope, headers={**envelope.headers, DROPPED: reason, KEPT: kept})
    await send(marked)
    shown = reason + (f" (kept {kept})" if kept else "")
    handle = TaskHandle(envelope.id, envelope.task, queue, 0, False, app, dropped=True)
    return replace(handle, drop=(shown, kept))


async def debounce(
    app: GateApp,
    envelope: Envelope,
    queue: str,
    gate: Gate,
    partition_key: str | None,
    lane: bool = False,
    level: int = 5,
) -> TaskHandle:
    """One run, `gate.debounce` seconds after the last call, with the last call's
    arguments; every call of a burst gets the burst's task id."""
    assert gate.debounce is not None and gate.key is not None
    client = await app.client()
    part = await client.place(queue, partition_key or gate.key)
    placed = client.placed(envelope, queue, part, lane, level)
    found: list[tuple[str, bool]] = []

    async def publish(final: Envelope) -> None:
        found.append(await bursts.call(client, final, gate.key or "", gate.debounce or 0.0))

    await app.middleware.enqueue(placed, publish)
    if len(found) != 1:
        raise TaskqError(f"an enqueue middleware did not call call_next once: {envelope.task}")
    burst_id, going_on = found[0]
    return TaskHandle(burst_id, envelope.task, queue, 0, going_on, app)


def _stored_id(data: bytes) -> str | None:
    try:
        value = json.loads(data).get("id")
    except (ValueError, AttributeError):
        return None
    return str(value) if value else None


def _mark(task_id: str) -> bytes:
    return json.dumps({"id": task_id}).encode()


async def _or_release(
    client: Client, stream: str, seq: int, publish: Awaitable[TaskHandle]
) -> TaskHandle:
    """Await the publish; if it fails, remove the window's record (it holds no task)."""
    try:
        return await publish
    except BaseException:
        await _quietly(client.connection.messages.delete(stream, seq))
        raise


async def _quietly(call: Awaitable[object]) -> None:
    try:
        await call
    except TaskqError as exc:
        log.debug("flow-control bookkeeping failed: %s", exc)
