"""`taskq tasks ls`: recent tasks, newest first, filtered by name, queue, state and id
prefix (taskq.operate.task_list; the dashboard's `/tasks`)."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import click

from taskq.cli.common import Context, pass_ctx
from taskq.operate.task_list import STATES, ListedTask, TaskFilters, recent

if TYPE_CHECKING:
    from taskq.client import Client


@click.group()
def tasks() -> None:
    """Recent tasks: what the results bucket recorded, newest first."""


@tasks.command("ls")
@click.option("--name", metavar="TASK", help="the task's name (billing.charge)")
@click.option("--queue", metavar="QUEUE", help="the queue it ran from")
@click.option("--state", type=click.Choice(STATES), help="its current state")
@click.option("--id", "id_prefix", metavar="PREFIX", help="ids starting with PREFIX")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option(
    "--before",
    type=click.IntRange(1),
    metavar="CURSOR",
    help="older than CURSOR (a `more:` line's)",
)
@click.option("--json", "as_json", is_flag=True, help="an array of objects, for scripts")
@pass_ctx
def ls(
    ctx: Context,
    name: str | None,
    queue: str | None,
    state: str | None,
    id_prefix: str | None,
    limit: int,
    before: int | None,
    as_json: bool,
) -> None:
    """List recorded tasks, newest first (by their latest record). A task is listed once
    an attempt settled, or it was cancelled or dropped; waiting ones are in `taskq queues`."""
    filters = TaskFilters(name, queue, state, id_prefix)  # ConfigError: exit 2
    found, older = ctx.run(lambda client: _collect(client, filters, limit, before))
    if as_json:
        click.echo(json.dumps([t.to_dict() for t in found], indent=2))
        return
    if not found:
        click.echo("no tasks")
        return
    click.echo(f"{'UPDATED':20}  {'STATE':9}  {'QUEUE':10}  {'TASK':20}  {'ID':26}  TRIES  ERROR")
    for t in found:
        click.echo(_row(t))
    if older is not None:
        click.echo(f"more: {_again(filters, limit, older)}")


async def _collect(
    client: Client, filters: TaskFilters, limit: int, before: int | None
) -> tuple[list[ListedTask], int | None]:
    """Up to `limit` tasks, page after page (each page's read is bounded; a command may
    read on until it has them), and the cursor of what is older."""
    found: list[ListedTask] = []
    while True:
        page = await recent(client, filters, limit=limit - len(found), before=before)
        found += page.tasks
        before = page.older
        if before is None or len(found) >= limit:
            return found, before


def _row(t: ListedTask) -> str:
    updated = t.updated_at[:19] + "Z" if t.updated_at else "-"
    error = f"{t.error['type']}: {t.error['message']}" if t.error else ""
    return (
        f"{updated:20}  {t.state:9}  {t.queue[:10]:10}  {t.task[:20]:20}  {t.id:26}  "
        f"{t.attempts:>5}  {error[:60]}"
    )


def _again(filters: TaskFilters, limit: int, before: int) -> str:
    """The command that lists the next older tasks."""
    words = ["taskq", "tasks", "ls"]
    for flag, value in (
        ("--name", filters.name),
        ("--queue", filters.queue),
        ("--state", filters.state),
        ("--id", filters.id_prefix),
    ):
        if value:
            words += [flag, value]
    words += ["--limit", str(limit), "--before", str(before)]
    return shlex.join(words)
