"""`taskq doctor`: check a deployment before going live, one line per check."""

from __future__ import annotations

import json

import click

from taskq.cli.common import Context, pass_ctx, run_async
from taskq.doctor import diagnose, worst
from taskq.doctor.monitor import split_urls


@click.command()
@click.option(
    "--monitor",
    "monitors",
    multiple=True,
    metavar="URL",
    help="nats-server monitoring endpoint, e.g. http://127.0.0.1:8222 (repeat once per node) "
    "[env TASKQ_MONITOR_URL, comma-separated]",
)
@click.option("--json", "as_json", is_flag=True, help="a JSON list of {check, status, detail, fix}")
@pass_ctx
def doctor(ctx: Context, monitors: tuple[str, ...], as_json: bool) -> None:
    """Check servers, versions, durability, replicas, storage, clocks, TLS, shipped
    passwords and permissions.

    Exit 1 when any check fails (warnings alone exit 0)."""
    settings = ctx.settings()
    checks = run_async(diagnose(settings, list(monitors) or split_urls(settings.monitor_url)))
    if as_json:
        click.echo(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        for check in checks:
            click.echo(check.line())
        counts = {s: sum(c.status == s for c in checks) for s in ("ok", "warn", "fail")}
        click.echo(f"doctor: {counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail")
    if worst(checks) == "fail":
        click.get_current_context().exit(1)
