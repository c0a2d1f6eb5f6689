"""`taskq outbox`: the transactional outbox's table (`init`), its backlog (`status`) and
its relay (`relay MODULE:APP`), each given the database with `--db URL`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from taskq.cli.common import Context, pass_ctx, run_async

if TYPE_CHECKING:
    from taskq.client import Client
    from taskq.outbox.report import Backlog

DB = click.option(
    "--db",
    "url",
    required=True,
    metavar="URL",
    help="the outbox's database: postgresql://user:pw@host/db or sqlite:///path",
)


@click.group()
def outbox() -> None:
    """The transactional outbox: tasks written in the app's database transaction."""


@outbox.command()
@DB
def init(url: str) -> None:
    """Create the outbox table (and its index) where missing."""
    from taskq.outbox import load

    run_async(load("database").create_table(url))
    click.echo(f"outbox table ready in {load('database').shown(url)}")


@outbox.command()
@DB
@click.option("--json", "as_json", is_flag=True, help="one JSON object per prefix, a list")
@pass_ctx
def status(ctx: Context, url: str, as_json: bool) -> None:
    """Rows waiting per prefix (the global --prefix: that one alone) and the oldest's age;
    warns when it is older than the dedup window."""
    from taskq.outbox import load

    found: list[Backlog] = run_async(load("report").read_backlogs(url, ctx.prefix))
    window = ctx.settings().duplicate_window
    if as_json:
        rows = [{**b.__dict__, "beyond_dedup": b.oldest_age > window} for b in found]
        click.echo(json.dumps(rows))
        return
    click.echo(f"{'PREFIX':20} {'ROWS':>9} {'OLDEST':>10}")
    for b in found:
        click.echo(f"{b.prefix[:20]:20} {b.rows:>9} {b.oldest_age:>9.1f}s")
        if b.oldest_age > window:
            click.echo(
                f"  warning: a row waits beyond the {window:g}s dedup window: a relay that "
                "published it and died before deleting it publishes it again as a new message"
            )
    if not found:
        click.echo("no rows waiting")


@outbox.command()
@click.argument("app_spec", metavar="MODULE:APP")
@DB
@click.option("--batch", type=click.IntRange(1, 10_000), default=1000, show_default=True)
@click.option(
    "--poll",
    type=click.FloatRange(0.01, 3600),
    default=1.0,
    show_default=True,
    help="seconds between passes when no NOTIFY wakes the relay (SQLite: always)",
)
@pass_ctx
def relay(ctx: Context, app_spec: str, url: str, batch: int, poll: float) -> None:
    """Publish MODULE:APP's committed outbox rows until Ctrl-C or SIGTERM."""
    from taskq.outbox import load

    app = ctx.app(app_spec)

    async def go(_client: Client) -> None:
        await load("relay").serve(app, url, batch=batch, poll=poll)

    ctx.run(go, app=app)
