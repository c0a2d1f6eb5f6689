"""`taskq queues`: what every queue is doing, once or refreshed (`--watch`); and the
operator's controls: `pause`, `resume`, `purge`.

`taskq queues [OPTIONS]` (no subcommand) is `taskq queues ls [OPTIONS]`: the command and its
`--json` output predate the subcommands and stay as they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from taskq.cli.common import Context, confirm, parse_duration, pass_ctx
from taskq.cli.progressbar import progress
from taskq.client import Client
from taskq.errors import UnknownQueue
from taskq.operate.queue_control import (
    QueuePause,
    pause_queue,
    purge_queue,
    resume_queue,
    stored_tasks,
)
from taskq.operate.queue_stats import QueueStats, size, snapshot


def table(stats: list[QueueStats]) -> str:
    if not stats:
        return "no queues"
    lines = [
        f"{'QUEUE':14} {'PAUSED':15} {'PARTS':>5} {'WAITING':>8} {'RUNNABLE':>8} "
        f"{'IN FLIGHT':>9} {'HELD':>6} {'DELAYED':>7} {'REDELIV':>7} {'PULLS':>5} {'DEAD':>6} "
        f"{'IN/s':>8} {'DONE/s':>8} {'STORED':>10}  TASKS (stored)"
    ]
    for s in stats:
        tasks = ", ".join(f"{t}={n}" for t, n in s.per_task.items()) or "-"
        lines.append(
            f"{s.queue[:14]:14} {paused_cell(s.paused, s.paused_until):15} {s.partitions:>5} "
            f"{s.waiting:>8} {s.runnable:>8} {s.in_flight:>9} {s.held:>6} {s.delayed:>7} "
            f"{s.redelivered:>7} {s.pulls_waiting:>5} {s.dead:>6} {s.enqueued_per_s:>8.1f} "
            f"{s.settled_per_s:>8.1f} {size(s.bytes):>10}  {tasks[:60]}"
        )
        # which limits hold tasks back (docs/flow-control.md)
        lines += [f"{'':14}   held by {limit}: {n}" for limit, n in sorted(s.held_by.items())]
        # an edge hub's: sent to a site, not yet stored there (docs/edge.md)
        lines += [f"{'':14}   for site {site}: {n}" for site, n in sorted(s.sites.items())]
    return "\n".join([*lines, storage_line(stats[0])])


def storage_line(stats: QueueStats) -> str:
    """The account's storage against its limit: a full store refuses enqueues."""
    limit = stats.storage_limit
    if limit is None:
        used = size(stats.storage_used)
        return f"storage: {used} used (no account limit; the server's max_file_store applies)"
    share = 100.0 * stats.storage_used / limit
    return f"storage: {size(stats.storage_used)} used of {size(limit)} ({share:.0f}%)"


def paused_cell(paused: bool, until: str | None) -> str:
    """`-`, `until resumed`, `until 14:05:09Z` (today, UTC) or `until 2026-11-24`."""
    if not paused:
        return "-"
    if until is None:
        return "until resumed"
    today = datetime.now(UTC).date().isoformat()
    return f"until {until[11:19]}Z" if until.startswith(today) else f"until {until[:10]}"


def list_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options of `taskq queues` / `taskq queues ls`."""
    fn = click.option("--watch", is_flag=True, help="refresh every interval until Ctrl-C")(fn)
    fn = click.option("--json", "as_json", is_flag=True)(fn)
    fn = click.option(
        "--interval",
        type=click.FloatRange(0),
        default=1.0,
        show_default=True,
        help="seconds over which throughput is measured (0: none)",
    )(fn)
    return click.option("-q", "--queue", "queues", multiple=True, help="only these queues")(fn)


@click.group(invoke_without_command=True)
@list_options
@pass_ctx
def queues(
    ctx: Context, queues: tuple[str, ...], interval: float, as_json: bool, watch: bool
) -> None:
    """Per queue: paused or not, waiting, in flight, held by a flow-control limit (and by
    which), redelivered, pulls waiting, dead letters, throughput, and stored messages per
    task (also `taskq queues ls`).
    Subcommands pause, resume and purge a queue."""
    if click.get_current_context().invoked_subcommand is None:
        _list(ctx, queues, interval, as_json, watch)


@queues.command("ls")
@list_options
@pass_ctx
def ls(ctx: Context, queues: tuple[str, ...], interval: float, as_json: bool, watch: bool) -> None:
    """Per queue: what `taskq queues` shows."""
    _list(ctx, queues, interval, as_json, watch)


def _list(
    ctx: Context, queues: tuple[str, ...], interval: float, as_json: bool, watch: bool
) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        ctx.run(lambda client: _show(client, list(queues) or None, interval, as_json, watch))


async def _show(
    client: Client, names: list[str] | None, interval: float, as_json: bool, watch: bool
) -> None:
    while True:
        stats = await snapshot(client, names, interval if interval > 0 or not watch else 1.0)
        if as_json:
            click.echo(json.dumps([s.to_dict() for s in stats]))
        else:
            if watch:
                click.clear()
            click.echo(table(stats))
        if not watch:
            return
        await asyncio.sleep(0)


def _known(ctx: Context, work: Callable[[Client], Any]) -> Any:
    """`ctx.run(work)`, an unknown queue being the user's mistake (a usage error, exit 2)."""
    try:
        return ctx.run(work)
    except UnknownQueue as exc:
        raise click.BadParameter(str(exc), param_hint="QUEUE") from None


@queues.command()
@click.argument("queue")
@click.option(
    "--for",
    "for_",
    callback=parse_duration,
    metavar="DURATION",
    help="resume by itself after this long: 30s, 15m, 2h, 7d (default: until resumed)",
)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def pause(ctx: Context, queue: str, for_: float | None, as_json: bool) -> None:
    """Stop workers receiving QUEUE's tasks (every partition). Running tasks finish;
    enqueueing keeps working."""
    state: QueuePause = _known(ctx, lambda client: pause_queue(client, queue, for_=for_))
    _report(state, as_json)


@queues.command()
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def resume(ctx: Context, queue: str, as_json: bool) -> None:
    """Let workers receive QUEUE's tasks again."""
    state: QueuePause = _known(ctx, lambda client: resume_queue(client, queue))
    _report(state, as_json)


def _report(state: QueuePause, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(state.to_dict()))
        return
    public = state.to_dict()
    cell = paused_cell(state.paused, public["paused_until"])
    click.echo(f"{state.queue}: paused {cell}" if state.paused else f"{state.queue}: running")


@queues.command()
@click.argument("queue")
@click.option("--task", help="only this task's messages")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def purge(ctx: Context, queue: str, task: str | None, yes: bool, as_json: bool) -> None:
    """Remove QUEUE's stored tasks (every partition; only TASK's with --task), printing how
    many. Schedules (delayed and periodic tasks) stay; see `taskq schedules rm`."""
    which = f"task {task!r} of queue {queue!r}" if task else f"queue {queue!r}"

    def question() -> str:
        count = _known(ctx, lambda client: stored_tasks(client, queue, task))
        return f"remove the {count} stored task(s) of {which}?"

    confirm(yes, question, "purge")

    async def go(client: Client) -> int:
        with progress("purge", await stored_tasks(client, queue, task)) as advance:
            return await purge_queue(client, queue, task, advance)

    purged: int = _known(ctx, go)
    if as_json:
        click.echo(json.dumps({"queue": queue, "task": task, "purged": purged}))
    else:
        click.echo(f"purged {purged} task(s) of {which}")
