"""`taskq workers`: the live worker processes, from their heartbeats."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from taskq.cli.common import Context, pass_ctx

if TYPE_CHECKING:
    from taskq.client import Client
    from taskq.records.heartbeats import WorkerRecord


@click.command()
@click.option("--json", "as_json", is_flag=True, help="one JSON object per worker, a list")
@pass_ctx
def workers(ctx: Context, as_json: bool) -> None:
    """List live workers: host, pid, queues, running tasks, uptime, heartbeat age."""
    from taskq.records.heartbeats import list_workers

    async def go(client: Client) -> list[WorkerRecord]:
        return await list_workers(client)

    found = ctx.run(go)
    if as_json:
        click.echo(json.dumps([w.to_dict() for w in found]))
    else:
        click.echo(table(found))


def table(found: list[WorkerRecord]) -> str:
    if not found:
        return "no workers"
    lines = [
        f"{'WORKER':28} {'QUEUES':20} {'CONC':>5} {'POOL':>4} {'RUNNING':>7} {'DONE':>7} "
        f"{'RETRIED':>7} {'DEAD':>5} {'CANCELLED':>9} {'UPTIME':>8} {'BEAT':>5}  STATUS"
    ]
    for w in found:
        counts = w.counts
        lines.append(
            f"{w.id[:28]:28} {','.join(w.queues)[:20]:20} {w.concurrency:>5} "
            f"{w.pool_size or '-':>4} {len(w.running):>7} {counts.get('succeeded', 0):>7} "
            f"{counts.get('retried', 0):>7} {counts.get('dead', 0):>5} "
            f"{counts.get('cancelled', 0):>9} {_span(w.uptime()):>8} {w.heartbeat_age():>4.0f}s"
            f"  {'unhealthy' if w.problem else 'ok'}"
        )
        if w.problem:
            lines.append(f"    unhealthy: {w.problem}")
        for task in w.running[:10]:
            lines.append(
                f"    running {task.task}[{task.id}] attempt {task.attempt} since {task.started_at}"
            )
    return "\n".join(lines)


def _span(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
