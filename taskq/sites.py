"""Sending tasks from the hub to an edge site (docs/edge.md): `task.options(site="s1")`
publishes into the hub's outbox for that site and queue, a work-queue stream the site's
queue stream sources once the leaf connection is up; the task waits at the hub meanwhile.
Its result comes back with the site's results (the hub's results bucket sources them), so
`handle.result()` at the hub works unchanged."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from taskq.bulk import from_template, publish_many, through_middleware
from taskq.errors import ConfigError, TaskqError
from taskq.handle import TaskHandle
from taskq.records.envelope import Envelope
from taskq.topology.names import check_queue, check_site


class TaskCall(Protocol):
    """A task bound to call options (taskq.task.TaskCall, which calls in here)."""

    @property
    def task(self) -> Any: ...

    @property
    def opts(self) -> Any: ...


def _checked(call: TaskCall) -> tuple[str, str]:
    """(site, queue) of a call bound for a site; ConfigError for what does not cross yet."""
    task, opts = call.task, call.opts
    site = check_site(opts.site or "")
    if opts.gate.active:
        raise ConfigError(
            "site= takes no unique_for, debounce or throttle (their records are local)"
        )
    if opts.partition_key is not None or opts.priority not in (None, task.priority):
        raise ConfigError("site= takes no partition_key or priority: a site's queue gets it as is")
    if task.lane or task.limits is not None:
        raise ConfigError(f"task {task.name!r} has limits: they are not carried to a site yet")
    return site, check_queue(opts.queue or task.queue)


async def _staged(
    call: TaskCall, envelopes: list[Envelope], site: str, queue: str
) -> list[Envelope]:
    """The envelopes addressed to the site's outbox, through the enqueue middleware."""
    app = call.task.app
    names = (await app.client()).names
    addressed = [e.addressed(queue, names.site_subject(site, queue, e.task)) for e in envelopes]
    staged = await through_middleware(app.middleware, addressed)
    if staged is None:
        raise TaskqError(f"an enqueue middleware dropped a call of {call.task.name}: not sent")
    return staged


async def enqueue(call: TaskCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskHandle:
    """Send one call to its site."""
    site, queue = _checked(call)
    envelope = call.task.build_envelope(args, kwargs, call.opts)
    (final,) = await _staged(call, [envelope], site, queue)
    client = await call.task.app.client()
    return TaskHandle.of(await client.publish_placed(final), call.task.app)


async def enqueue_many(
    call: TaskCall, items: Iterable[tuple[list[Any], dict[str, Any]]]
) -> list[TaskHandle]:
    """Send many calls to their site, pipelined (atomic batches where the stream allows)."""
    site, queue = _checked(call)
    task = call.task
    template = task.stamp(call.opts, "", [], {})
    envelopes = from_template(template, task.validator.for_wire_many(list(items)))
    staged = await _staged(call, envelopes, site, queue)
    app = task.app
    client = await app.client()
    stream = client.names.site_stream(site, queue)
    sent = await publish_many(client, staged, [stream] * len(staged))
    return [TaskHandle.of(published, app) for published in sent]
