"""`taskq enqueue MODULE:APP TASK [JSON_ARGS]`: put one task on its queue; with
`--from FILE`, one task per line of a JSON-lines file, published pipelined."""

from __future__ import annotations

import json
from typing import IO, Any

import click

from taskq.app import App
from taskq.cli.common import Context, parse_json_args, pass_ctx
from taskq.cli.progressbar import progress
from taskq.errors import ArgumentsError, ConfigError, TaskqError
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
@click.option(
    "--priority", type=click.IntRange(0, 9), help="0-9, higher first [default: the task's]"
)
@click.option(
    "--countdown", type=click.FloatRange(0), metavar="SECONDS", help="run SECONDS from now"
)
@click.option(
    "--unique-for",
    type=click.FloatRange(0, min_open=True),
    metavar="SECONDS",
    help="the same task and arguments (or --key) within SECONDS enqueue once",
)
@click.option(
    "--debounce",
    type=click.FloatRange(0, min_open=True),
    metavar="SECONDS",
    help="run once, SECONDS after the last enqueue with --key (last arguments win)",
)
@click.option(
    "--throttle",
    type=click.FloatRange(0, min_open=True),
    metavar="SECONDS",
    help="at most one run per SECONDS per --key; extra enqueues are dropped",
)
@click.option(
    "--from",
    "lines",
    type=click.File("r"),
    metavar="FILE",
    help="enqueue one task per line of FILE, each line a JSON_ARGS (JSON lines; - for "
    "stdin); every line is checked before any is sent",
)
@click.option("--json", "as_json", is_flag=True, help="print the handle(s) as JSON (lines)")
@pass_ctx
def enqueue(
    ctx: Context,
    /,
    app_spec: str,
    task_name: str,
    json_args: str | None,
    key: str | None,
    partition_key: str | None,
    queue: str | None,
    lines: IO[str] | None,
    as_json: bool,
    **flow: float | None,
) -> None:
    """Enqueue TASK with JSON_ARGS: a JSON array (positional) or object (keyword); or one
    task per line of FILE with --from. --priority, --countdown, --unique-for, --debounce and
    --throttle are the call options of docs/flow-control.md."""
    app = ctx.app(app_spec)
    task = find_task(app, task_name)
    chosen = {name: value for name, value in flow.items() if value is not None}
    try:
        call = task.options(key=key, partition_key=partition_key, queue=queue, **chosen)
    except ConfigError as exc:  # e.g. --debounce without --key
        raise click.UsageError(str(exc)) from None
    if lines is not None:
        if json_args is not None or key is not None:
            raise click.UsageError("--from takes neither JSON_ARGS nor --key (each line is one)")
        enqueue_lines(ctx, app, call, lines, as_json)
    else:
        args, kwargs = parse_json_args(json_args)
        try:
            check_call(call, args, kwargs)  # a usage error even when no server answers
            handle = ctx.run(lambda _client: call.enqueue(*args, **kwargs), app=app)
        except ArgumentsError as exc:  # the user's JSON_ARGS do not fit the signature
            raise click.BadParameter(str(exc), param_hint="JSON_ARGS") from None
        echo_handle(handle, as_json)
    if queue is not None:
        warn_if_unconsumed(ctx, app, queue)


def warn_if_unconsumed(ctx: Context, app: App, queue: str) -> None:
    """A line on stderr when no live worker consumes `queue` (a queue named by hand may be
    one no worker was started for); nothing when the workers' registry cannot be read."""
    from taskq.records.heartbeats import list_workers

    try:
        workers = ctx.run(lambda client: list_workers(client), app=app)
    except (TaskqError, click.ClickException):
        return
    if not any(queue in worker.queues for worker in workers):
        click.echo(
            f"warning: no live worker consumes queue {queue!r}: the task waits until one "
            f"starts (taskq worker MODULE:APP -q {queue})",
            err=True,
        )


CHUNK = 1000  # lines per `enqueue_many`: each one pipelined, its acks awaited at its end


def enqueue_lines(ctx: Context, app: App, call: TaskCall, lines: IO[str], as_json: bool) -> None:
    """Check every line of `lines` (a bad one is a usage error naming it, and nothing is
    sent), then enqueue them all pipelined, in chunks, with a progress bar at a terminal."""
    items = [_checked_line(call, number, text) for number, text in enumerate(lines, 1)]
    items = [item for item in items if item is not None]

    async def send(_client: object) -> list[TaskHandle]:
        handles: list[TaskHandle] = []
        with progress("enqueue", len(items)) as advance:
            for start in range(0, len(items), CHUNK):
                chunk = items[start : start + CHUNK]
                handles += await call.enqueue_many(chunk)
                advance(len(chunk))
        return handles

    handles = ctx.run(send, app=app)
    for handle in handles if as_json else ():
        echo_handle(handle, as_json=True)
    if not as_json:
        click.echo(f"enqueued {len(handles)} task(s)")


def _checked_line(call: TaskCall, number: int, text: str) -> list[Any] | dict[str, Any] | None:
    """Line `number` as an `enqueue_many` item (None: a blank line), checked against the
    task's signature."""
    if not text.strip():
        return None
    try:
        args, kwargs = parse_json_args(text)
        check_call(call, args, kwargs)
    except (click.BadParameter, ArgumentsError) as exc:
        message = exc.message if isinstance(exc, click.BadParameter) else str(exc)
        raise click.BadParameter(f"line {number}: {message}", param_hint="--from") from None
    return kwargs if kwargs else args


def find_task(app: App, name: str) -> Task[Any, Any]:
    task = app.tasks.get(name)
    if task is None:
        known = ", ".join(sorted(app.tasks)) or "none"
        raise click.BadParameter(f"no task {name!r} (known: {known})", param_hint="TASK")
    return task


def check_call(call: TaskCall, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Raise what `call.enqueue(*args, **kwargs)` would for bad arguments (a nan among
    them too: JSON_ARGS may say NaN) or queue name."""
    call.task.build_envelope(args, kwargs, call.opts).encode()
    check_queue(call.opts.queue or call.task.queue)


def echo_handle(handle: TaskHandle, as_json: bool) -> None:
    if as_json:
        fields = {
            "id": handle.id,
            "task": handle.task,
            "queue": handle.queue,
            "seq": handle.seq,
            "duplicate": handle.duplicate,
            "dropped": handle.dropped,
        }
        click.echo(json.dumps(fields))
    else:
        note = " (duplicate: already enqueued)" if handle.duplicate else ""
        note = " (dropped: throttled)" if handle.dropped else note
        click.echo(f"{handle.id}{note}")
