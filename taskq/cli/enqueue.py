"""`taskq enqueue MODULE:APP TASK [JSON_ARGS]`: put one task on its queue."""

from __future__ import annotations

import json
from typing import Any

import click

from taskq.app import App
from taskq.cli.common import Context, parse_json_args, pass_ctx
from taskq.errors import ArgumentsError
from taskq.handle import TaskHandle
from taskq.task import Task, TaskCall
from taskq.topology.names import check_queue


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("task_name", metavar="TASK")
@click.argument("json_args", metavar="[JSON_ARGS]", required=False)
@click.option("--key", help="idempotency key (Nats-Msg-Id): the same key enqueues once")
@click.option("--partition-key", help="on a partitioned queue: the same key, the same partition")
@click.option("--queue", help="override the task's queue")
@click.option("--json", "as_json", is_flag=True, help="print the handle as JSON")
@pass_ctx
def enqueue(
    ctx: Context,
    app_spec: str,
    task_name: str,
    json_args: str | None,
    key: str | None,
    partition_key: str | None,
    queue: str | None,
    as_json: bool,
) -> None:
    """Enqueue TASK with JSON_ARGS: a JSON array (positional) or object (keyword)."""
    app = ctx.app(app_spec)
    task = find_task(app, task_name)
    args, kwargs = parse_json_args(json_args)
    call = task.options(key=key, partition_key=partition_key, queue=queue)
    try:
        check_call(call, args, kwargs)  # a usage error even when no server answers
        handle = ctx.run(lambda _client: call.enqueue(*args, **kwargs), app=app)
    except ArgumentsError as exc:  # the user's JSON_ARGS do not fit the signature
        raise click.BadParameter(str(exc), param_hint="JSON_ARGS") from None
    echo_handle(handle, as_json)


def find_task(app: App, name: str) -> Task[Any, Any]:
    task = app.tasks.get(name)
    if task is None:
        known = ", ".join(sorted(app.tasks)) or "none"
        raise click.BadParameter(f"no task {name!r} (known: {known})", param_hint="TASK")
    return task


def check_call(call: TaskCall, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Raise what `call.enqueue(*args, **kwargs)` would for bad arguments or queue name."""
    call.task.build_envelope(args, kwargs, call.opts)
    check_queue(call.opts.queue or call.task.queue)


def echo_handle(handle: TaskHandle, as_json: bool) -> None:
    if as_json:
        fields = {
            "id": handle.id,
            "task": handle.task,
            "queue": handle.queue,
            "seq": handle.seq,
            "duplicate": handle.duplicate,
        }
        click.echo(json.dumps(fields))
    else:
        note = " (duplicate: already enqueued)" if handle.duplicate else ""
        click.echo(f"{handle.id}{note}")
