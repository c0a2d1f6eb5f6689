"""`taskq schedules ls|rm|prune`: the server-side schedules of delayed and periodic tasks."""

from __future__ import annotations

import json

import click

from taskq.cli.common import Context, pass_ctx
from taskq.client import Client


@click.group()
def schedules() -> None:
    """Delayed and periodic tasks, stored as message schedules on the server."""


@schedules.command("ls")
@click.option("-q", "--queue", "queues", multiple=True, help="only these queues")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="taskq's own too: durable runs' timers, deadlines and expiries, held tasks",
)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def ls(ctx: Context, queues: tuple[str, ...], everything: bool, as_json: bool) -> None:
    """List schedules: queue, name, schedule expression, next run and target subject (the
    user's: periodic and delayed tasks; --all: taskq's own too)."""
    from taskq.records.schedules import list_schedules, users

    found = ctx.run(lambda client: list_schedules(client, list(queues) or None))
    found = users(found, everything)
    if as_json:
        click.echo(json.dumps([vars(s) for s in found], indent=2))
        return
    if not found:
        click.echo("no schedules")
        return
    click.echo(f"{'QUEUE':12}  {'NAME':36}  {'SCHEDULE':28}  {'NEXT RUN':24}  TARGET")
    for s in found:
        next_run = s.next_run or "-"
        click.echo(f"{s.queue:12}  {s.name:36}  {s.expression:28}  {next_run:24}  {s.target}")


@schedules.command()
@click.argument("name")
@click.option("-q", "--queue", default="default", show_default=True)
@pass_ctx
def rm(ctx: Context, name: str, queue: str) -> None:
    """Cancel schedule NAME (as listed: periodic.cleanup, task.<id>; or a delayed task's id)."""
    from taskq.records.schedules import remove

    if not ctx.run(lambda client: remove(client, queue, name)):
        raise click.BadParameter(f"no schedule {name!r} in queue {queue!r}", param_hint="NAME")
    click.echo(f"removed {name}")


@schedules.command()
@click.argument("app_spec", metavar="MODULE:APP")
@pass_ctx
def prune(ctx: Context, app_spec: str) -> None:
    """Remove periodic schedules whose task is no longer declared in MODULE:APP."""
    from taskq.records.schedules import PERIODIC, list_schedules, remove

    app = ctx.app(app_spec)

    async def go(client: Client) -> list[str]:
        removed = []
        for s in await list_schedules(client):
            task = s.name.removeprefix(PERIODIC + ".")
            if s.name.startswith(PERIODIC + ".") and task not in app.periodics:
                await remove(client, s.queue, s.name)
                removed.append(f"{s.queue}/{s.name}")
        return removed

    removed = ctx.run(go, app=app)
    for item in removed:
        click.echo(f"removed {item}")
    click.echo(f"pruned {len(removed)} schedule(s)")
