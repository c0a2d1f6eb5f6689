"""`taskq result ID`: a task's state and return value, optionally waiting for it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from taskq.cli.common import Context, pass_ctx
from taskq.errors import ResultTimeout

if TYPE_CHECKING:
    from taskq.client import Client
    from taskq.results import ResultRecord


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
    from taskq.results import fetch
    from taskq.results import wait as wait_for

    async def go(client: Client) -> ResultRecord | None:
        if wait:
            return await wait_for(client, task_id, timeout)
        return await fetch(client, task_id)

    try:
        record = ctx.run(go)
    except ResultTimeout as exc:
        raise click.ClickException(str(exc)) from None
    echo_record(task_id, record, as_json)
    if record is not None and record.state == "dead":
        raise SystemExit(1)


def echo_record(task_id: str, record: ResultRecord | None, as_json: bool) -> None:
    payload: dict[str, Any] = {"id": task_id, "state": record.state if record else "queued"}
    if record is not None:
        payload.update(record.model_dump(exclude={"state"}))
    if as_json:
        click.echo(json.dumps(payload, default=repr))
        return
    click.echo(f"{task_id}: {payload['state']}")
    if record is not None and record.state == "succeeded":
        click.echo(json.dumps(record.result, default=repr))
    elif record is not None and record.error:
        click.echo(f"{record.error.get('type')}: {record.error.get('message')}")
