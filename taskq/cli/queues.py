"""`taskq queues`: what every queue is doing, once or refreshed (`--watch`)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import click

from taskq.cli.common import Context, pass_ctx
from taskq.client import Client
from taskq.queue_stats import QueueStats, snapshot


def table(stats: list[QueueStats]) -> str:
    if not stats:
        return "no queues"
    lines = [
        f"{'QUEUE':14} {'PARTS':>5} {'WAITING':>8} {'IN FLIGHT':>9} {'REDELIV':>7} {'PULLS':>5} "
        f"{'DEAD':>6} {'IN/s':>8} {'DONE/s':>8}  TASKS (stored)"
    ]
    for s in stats:
        tasks = ", ".join(f"{t}={n}" for t, n in s.per_task.items()) or "-"
        lines.append(
            f"{s.queue[:14]:14} {s.partitions:>5} {s.waiting:>8} {s.in_flight:>9} "
            f"{s.redelivered:>7} {s.pulls_waiting:>5} {s.dead:>6} {s.enqueued_per_s:>8.1f} "
            f"{s.settled_per_s:>8.1f}  {tasks[:60]}"
        )
    return "\n".join(lines)


@click.command()
@click.option("-q", "--queue", "queues", multiple=True, help="only these queues")
@click.option(
    "--interval",
    type=click.FloatRange(0),
    default=1.0,
    show_default=True,
    help="seconds over which throughput is measured (0: none)",
)
@click.option("--json", "as_json", is_flag=True)
@click.option("--watch", is_flag=True, help="refresh every interval until Ctrl-C")
@pass_ctx
def queues(
    ctx: Context, queues: tuple[str, ...], interval: float, as_json: bool, watch: bool
) -> None:
    """Per queue: waiting, in flight, redelivered, pulls waiting, dead letters, throughput,
    and stored messages per task."""
    with contextlib.suppress(KeyboardInterrupt):
        ctx.run(lambda client: _show(client, list(queues) or None, interval, as_json, watch))


async def _show(
    client: Client, names: list[str] | None, interval: float, as_json: bool, watch: bool
) -> None:
    while True:
        stats = await snapshot(client, names, interval if interval > 0 or not watch else 1.0)
        if as_json:
            click.echo(json.dumps([s.public() for s in stats]))
        else:
            if watch:
                click.clear()
            click.echo(table(stats))
        if not watch:
            return
        await asyncio.sleep(0)
