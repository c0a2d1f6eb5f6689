"""`taskq schedules ls|rm|prune`: the server-side schedules of delayed and periodic tasks."""

from __future__ import annotations

import json
from typing import Any

import click

from taskq.cli import Context, pass_ctx, run_async


@click.group()
def schedules() -> None:
    """Delayed and periodic tasks, stored as message schedules on the server."""


@schedules.command("ls")
@click.option("-q", "--queue", "queues", multiple=True, help="only these queues")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def ls(ctx: Context, queues: tuple[str, ...], as_json: bool) -> None:
    """List schedules: name, queue, schedule expression and target subject."""
    from taskq.schedules import list_schedules

    app = ctx.app()

    async def go() -> list[Any]:
        try:
            return await list_schedules(app, list(queues) or None)
        finally:
            await app.aclose()

    found = run_async(go())
    if as_json:
        click.echo(json.dumps([vars(s) for s in found], indent=2))
        return
    if not found:
        click.echo("no schedules")
        return
    click.echo(f"{'QUEUE':12}  {'NAME':36}  {'SCHEDULE':28}  TARGET")
    for s in found:
        click.echo(f"{s.queue:12}  {s.name:36}  {s.expression:28}  {s.target}")


@schedules.command()
@click.argument("name")
@click.option("-q", "--queue", default="default", show_default=True)
@pass_ctx
def rm(ctx: Context, name: str, queue: str) -> None:
    """Cancel schedule NAME (e.g. periodic.cleanup, or a delayed task's id)."""
    from taskq.schedules import remove

    app = ctx.app()

    async def go() -> bool:
        try:
            return await remove(app, queue, name)
        finally:
            await app.aclose()

    if not run_async(go()):
        raise click.BadParameter(f"no schedule {name!r} in queue {queue!r}", param_hint="NAME")
    click.echo(f"removed {name}")


@schedules.command()
@click.argument("app_spec", metavar="MODULE:APP")
@pass_ctx
def prune(ctx: Context, app_spec: str) -> None:
    """Remove periodic schedules whose task is no longer declared in MODULE:APP."""
    from taskq.schedules import PERIODIC, list_schedules, remove

    app = ctx.app(app_spec)

    async def go() -> list[str]:
        try:
            removed = []
            for s in await list_schedules(app):
                task = s.name.removeprefix(PERIODIC + ".")
                if s.name.startswith(PERIODIC + ".") and task not in app.periodics:
                    await remove(app, s.queue, s.name)
                    removed.append(f"{s.queue}/{s.name}")
            return removed
        finally:
            await app.aclose()

    removed = run_async(go())
    for item in removed:
        click.echo(f"removed {item}")
    click.echo(f"pruned {len(removed)} schedule(s)")


COMMANDS = [schedules]
