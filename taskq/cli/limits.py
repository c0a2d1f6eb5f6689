"""`taskq limits`: every flow-control limit (concurrency, per key, rate, open unique and
throttle windows) with its use now, and how many tasks each one holds back."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from taskq.cli.common import Context, pass_ctx
from taskq.errors import UnknownQueue

if TYPE_CHECKING:
    from taskq.client import Client
    from taskq.flowcontrol.usage import LimitUse


@click.command()
@click.option("-q", "--queue", "queues", multiple=True, help="only these queues' tasks")
@click.option("--json", "as_json", is_flag=True, help="a JSON list, one object per limit")
@pass_ctx
def limits(ctx: Context, queues: tuple[str, ...], as_json: bool) -> None:
    """Flow-control limits and their current use: running / in this window / keys busy,
    and tasks HELD waiting for the limit (see docs/flow-control.md)."""
    from taskq.flowcontrol.usage import limits_in_use
    from taskq.operate.queue_control import queue_parts

    async def go(client: Client) -> list[LimitUse]:
        for queue in queues:  # a typo is the user's mistake, as for `taskq queues pause`
            await queue_parts(client, queue)
        return await limits_in_use(client)

    try:
        found = [u for u in ctx.run(go) if not queues or u.queue in queues or not u.queue]
    except UnknownQueue as exc:
        raise click.BadParameter(str(exc), param_hint="'-q' / '--queue'") from None
    if as_json:
        click.echo(json.dumps([u.to_dict() for u in found]))
    else:
        click.echo(table(found))


def table(found: list[LimitUse]) -> str:
    if not found:
        return "no limits (declared by a worker's tasks, or open unique/throttle windows)"
    lines = [
        f"{'TASK':24} {'QUEUE':10} {'LIMIT':16} {'VALUE':18} {'IN USE':>7} {'HELD':>6}  DETAIL"
    ]
    for u in found:
        lines.append(
            f"{u.task[:24]:24} {u.queue[:10] or '-':10} {u.kind:16} {u.limit[:18]:18} "
            f"{u.in_use:>7} {u.held:>6}  {_detail(u)}"
        )
    return "\n".join(lines)


def _detail(u: LimitUse) -> str:
    if u.kind == "max_concurrency":
        return f"{u.waiting} waiting in its lane"
    if u.kind == "max_per_key":
        busy = sorted(u.keys.items(), key=lambda kv: -kv[1])[:5]
        return f"{len(u.keys)} key(s) busy" + (
            ": " + ", ".join(f"{k}={n}" for k, n in busy) if busy else ""
        )
    if u.kind == "rate_limit":
        return "this window" + (
            ": " + ", ".join(f"{k}={n}" for k, n in sorted(u.keys.items())[:5]) if u.keys else ""
        )
    return "open windows"
