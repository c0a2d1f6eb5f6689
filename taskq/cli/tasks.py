"""`taskq cancel ID...` and `taskq task ID`: acting on, and looking at, one task by id."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from taskq.cli.common import Context, pass_ctx
from taskq.operate.tracebacks import terminal_lines

if TYPE_CHECKING:
    from taskq.client import Client
    from taskq.operate.story import TaskStory
    from taskq.records.cancels import CancelReport


@click.command()
@click.argument("task_ids", metavar="ID...", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="one JSON report per id, a list")
@pass_ctx
def cancel(ctx: Context, task_ids: tuple[str, ...], as_json: bool) -> None:
    """Cancel tasks: a waiting or delayed one never runs, a running one is stopped.

    Exit 0 when every id was cancelled, is being stopped, or had already finished; exit 1
    when an id is unknown (its request is kept: if it waits in a queue, it never runs).
    An id is looked up by what the server indexes, never by reading a backlog."""
    from taskq.records.cancels import UNKNOWN
    from taskq.records.cancels import cancel as cancel_one

    async def go(client: Client) -> list[CancelReport]:
        return [await cancel_one(client, task_id) for task_id in task_ids]

    reports = ctx.run(go)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in reports]))
    else:
        for r in reports:
            click.echo(f"{r.task_id}: {r.outcome} ({r.state}): {r.detail}")
    if any(r.outcome == UNKNOWN for r in reports):
        raise SystemExit(1)


@click.command()
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True)
@click.option("-v", "--verbose", is_flag=True, help="the traceback as recorded, taskq's frames too")
@pass_ctx
def task(ctx: Context, task_id: str, as_json: bool, verbose: bool) -> None:
    """Everything about task ID: state, call, attempts, progress, result or error, dead
    letter, workflow (exit 1 if no such task is known)."""
    from taskq.operate.story import story

    async def go(client: Client) -> TaskStory | None:
        return await story(client, task_id)

    told = ctx.run(go)
    if told is None:
        raise click.ClickException(f"unknown task id {task_id}: not waiting, running or recorded")
    if as_json:
        click.echo(json.dumps(told.to_dict(), default=repr))
    else:
        click.echo(render(told, verbose))


def render(told: TaskStory, verbose: bool = False) -> str:
    """The story as text, for people."""
    lines = [
        f"{told.task}[{told.id}]  {told.state}"
        + (f" on {told.running_on}" if told.running_on else ""),
        f"  queue        {told.queue or '?'}",
        f"  call         {_call(told)}",
        f"  enqueued     {told.enqueued_at or '?'}",
    ]
    if told.held_by:
        lines.append(f"  held by      {told.held_by} (a flow-control limit; no attempt spent)")
    if told.due:
        lines.append(f"  due          {told.due}")
    if told.workflow:
        lines.append(f"  workflow     final task {told.workflow}")
    if told.failed_step:
        task = f" ({told.failed_task})" if told.failed_task else ""
        lines.append(f"  never ran    step {told.failed_step}{task} of its workflow failed")
    if told.progress:
        p = told.progress
        lines.append(f"  progress     {_value(p['value'])} {p.get('message') or ''}".rstrip())
    for a in told.attempts:
        error = f"  {a.error.get('type')}: {a.error.get('message')}" if a.error else ""
        span = f"{a.started_at or '?'} to {a.ended_at}"
        lines.append(f"  attempt {a.number:<3} {a.state:10} {a.worker or '?'} {span}{error}")
    lines += _ending(told, verbose)
    return "\n".join(lines)


def _ending(told: TaskStory, verbose: bool) -> list[str]:
    lines = []
    if told.state == "succeeded":
        lines.append(f"  result       {_short(told.result, 500)}")
    if told.error and told.state in ("dead", "failed"):
        lines.append(f"  error        {told.error.get('type')}: {told.error.get('message')}")
        trace = terminal_lines(told.error.get("traceback", ""), verbose)
        lines += [f"    {line}" for line in trace]
    if told.dead_letter:
        dl = told.dead_letter
        lines.append(
            f"  dead letter  seq {dl.get('seq')} reason {dl.get('reason')} at {dl.get('failed_at')}"
        )
    return lines


def _call(told: TaskStory) -> str:
    if told.args is None and told.kwargs is None:
        return "(not kept: over 8 KiB; a dead letter keeps the whole message)"
    return f"args={_short(told.args)} kwargs={_short(told.kwargs)}"


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _value(value: Any) -> str:
    return f"{value * 100:.0f}%" if isinstance(value, int | float) else json.dumps(value)
