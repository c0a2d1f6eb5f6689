"""`taskq result ID`: a task's state and return value, optionally waiting for it or
following its progress live."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import click

from taskq.cli.common import Context, pass_ctx
from taskq.errors import ResultTimeout

if TYPE_CHECKING:
    from taskq.client import Client
    from taskq.records.progress import Progress
    from taskq.records.results import ResultRecord


@click.command()
@click.argument("task_id", metavar="ID")
@click.option("--wait", is_flag=True, help="wait until the task succeeded or was dead-lettered")
@click.option(
    "--timeout",
    type=click.FloatRange(0),
    default=None,
    help="seconds to wait at most (with --wait)",
)
@click.option(
    "--follow",
    is_flag=True,
    help="print progress reports as they come, then the result (waits for the end)",
)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def result(
    ctx: Context, task_id: str, wait: bool, timeout: float | None, follow: bool, as_json: bool
) -> None:
    """Show the state and result of task ID (exit 1 if it failed, was cancelled, is
    unknown, or --wait timed out)."""
    from taskq.operate import unrecorded
    from taskq.records.results import fetch
    from taskq.records.results import wait as wait_for

    async def go(client: Client) -> tuple[ResultRecord | None, str]:
        if follow:
            final = await _follow(client, task_id, timeout, as_json)
            return final, final.state
        if wait:
            try:
                final = await wait_for(client, task_id, timeout)
            except ResultTimeout as exc:
                if exc.state != "queued":
                    raise
                # no record came: `queued` only if its message is somewhere to be run
                gone = await unrecorded.state(client, task_id, gone="unknown")
                raise ResultTimeout(task_id, exc.timeout, gone) from None
            return final, final.state
        record = await fetch(client, task_id)
        if record is not None:
            return record, record.state
        # no record: `queued` (or `running`) only if its message is somewhere to be run
        return None, await unrecorded.shown_state(client, task_id, gone="unknown")

    try:
        record, state = ctx.run(go)
    except ResultTimeout as exc:
        raise click.ClickException(str(exc)) from None
    echo_record(task_id, record, as_json, state)
    if state in ("dead", "cancelled", "unknown"):  # unknown: nothing knows the id
        raise SystemExit(1)


async def _follow(
    client: Client, task_id: str, timeout: float | None, as_json: bool
) -> ResultRecord:
    """Echo each progress report until the final record, which is returned."""
    from taskq.records.progress import watch
    from taskq.records.results import ResultRecord

    async def reports() -> ResultRecord:
        async for item in watch(client, task_id):
            if isinstance(item, ResultRecord):
                return item
            click.echo(_progress_line(item, as_json))
        raise AssertionError("the watch ends with the final record")

    try:
        return await asyncio.wait_for(reports(), timeout)
    except TimeoutError:
        raise ResultTimeout(task_id, timeout or 0.0, "unfinished") from None


def _progress_line(report: Progress, as_json: bool) -> str:
    if as_json:
        return json.dumps({"progress": report.model_dump()})
    value = report.value
    shown = f"{value * 100:5.1f}%" if isinstance(value, float) else json.dumps(value)
    return f"progress {shown}" + (f"  {report.message}" if report.message else "")


def echo_record(
    task_id: str, record: ResultRecord | None, as_json: bool, state: str | None = None
) -> None:
    payload: dict[str, Any] = {"id": task_id, "state": state or (record.state if record else "")}
    if record is not None:
        payload.update(record.model_dump(exclude={"state"}))
    if as_json:
        click.echo(json.dumps(payload, default=repr))
        return
    click.echo(f"{task_id}: {payload['state']}")
    if record is not None and record.state == "succeeded":
        click.echo(json.dumps(record.result, default=repr))
    elif record is not None and record.state == "cancelled":
        click.echo(record.reason or "cancelled")
    elif record is not None and record.error:
        click.echo(f"{record.error.get('type')}: {record.error.get('message')}")
