"""`taskq result ID`: a task's state and return value, optionally waiting for it."""

from __future__ import annotations

import json
from typing import Any

import click

from taskq.cli import Context, pass_ctx, run_async
from taskq.errors import ResultTimeout


@click.command()
@click.argument("task_id", metavar="ID")
@click.option("--wait", is_flag=True, help="wait until the task succeeded or was dead-lettered")
@click.option(
    "--timeout",
    type=click.FloatRange(0),
    default=None,
    help="seconds to wait at most (with --wait)",
)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def result(ctx: Context, task_id: str, wait: bool, timeout: float | None, as_json: bool) -> None:
    """Show the state and result of task ID (exit 1 if it failed or --wait timed out)."""
    from taskq.results import ResultRecord, fetch
    from taskq.results import wait as wait_for

    app = ctx.app()

    async def go() -> ResultRecord | None:
        try:
            if wait:
                return await wait_for(app, task_id, timeout)
            return await fetch(app, task_id)
        finally:
            await app.aclose()

    try:
        record = run_async(go())
    except ResultTimeout as exc:
        raise click.ClickException(str(exc)) from None
    payload: dict[str, Any] = {"id": task_id, "state": record.state if record else "queued"}
    if record is not None:
        payload.update(record.model_dump(exclude={"state"}))
    if as_json:
        click.echo(json.dumps(payload, default=repr))
    else:
        click.echo(f"{task_id}: {payload['state']}")
        if record is not None and record.state == "succeeded":
            click.echo(json.dumps(record.result, default=repr))
        elif record is not None and record.error:
            click.echo(f"{record.error.get('type')}: {record.error.get('message')}")
    if record is not None and record.state == "dead":
        raise SystemExit(1)


COMMANDS = [result]
