"""`taskq history`: tasks succeeded, dead-lettered and retried, and run-time percentiles,
window by window over the last hour or day, for all queues, one queue or one task name
(kept by the server: docs/dashboard.md, "History")."""

from __future__ import annotations

import json

import click

from taskq.cli.common import Context, pass_ctx
from taskq.operate.history import history as read_history
from taskq.records.history import SPANS, Window


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f}ms" if value < 1 else f"{value:.2f}s"


def table(windows: list[Window]) -> str:
    """The windows anything settled in, then the span's totals."""
    head = f"{'START':24} {'SUCCEEDED':>9} {'FAILED':>6} {'RETRIED':>7}"
    lines = [f"{head} {'P50':>9} {'P95':>9} {'P99':>9}"]
    busy = [w for w in windows if w.succeeded or w.failed or w.retried]
    for window in busy:
        shown = window.to_dict()
        lines.append(
            f"{shown['start']:24} {window.succeeded:>9} {window.failed:>6} {window.retried:>7} "
            f"{_seconds(shown['runtime_p50']):>9} {_seconds(shown['runtime_p95']):>9} "
            f"{_seconds(shown['runtime_p99']):>9}"
        )
    total = Window(0, 0)
    for window in windows:
        total.add(window)
    if not busy:
        lines.append("(nothing settled in this span)")
    lines.append(
        f"total: {total.succeeded} succeeded, {total.failed} failed, {total.retried} retried; "
        f"run time p50 {_seconds(total.percentile(0.5))}, p95 {_seconds(total.percentile(0.95))}, "
        f"p99 {_seconds(total.percentile(0.99))}"
    )
    return "\n".join(lines)


@click.command()
@click.option("-q", "--queue", help="this queue's history (default: all queues)")
@click.option("-t", "--task", help="this task name's history")
@click.option(
    "--span",
    type=click.Choice(list(SPANS)),
    default="1h",
    show_default=True,
    help="the last hour in 10 s windows, or the last day in 5 min windows",
)
@click.option("--json", "as_json", is_flag=True, help="every window of the span, as /api/history")
@pass_ctx
def history(ctx: Context, queue: str | None, task: str | None, span: str, as_json: bool) -> None:
    """What settled over time: tasks succeeded, failed (dead-lettered) and retried, and run
    time percentiles, per window, for all queues, one queue or one task name."""
    if queue and task:
        raise click.UsageError("give --queue or --task, not both")
    windows = ctx.run(lambda client: read_history(client, queue=queue, task=task, span=span))
    if as_json:
        click.echo(json.dumps([w.to_dict() for w in windows]))
    else:
        click.echo(table(windows))
