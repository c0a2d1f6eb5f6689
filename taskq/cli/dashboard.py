"""`taskq dashboard`: the web UI over queues, tasks, workers, dead letters, schedules and
workflows (the `taskq[dashboard]` extra). See docs/dashboard.md."""

from __future__ import annotations

import importlib.util

import click

from taskq.cli.common import Context, pass_ctx, run_async

NEEDS = ("starlette", "uvicorn", "jinja2")


def installed() -> bool:
    """Whether the `dashboard` extra is installed."""
    return all(importlib.util.find_spec(name) is not None for name in NEEDS)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8787, show_default=True, help="0: any free"
)
@click.option("--read-only", is_flag=True, help="refuse every action: pages only")
@click.option(
    "--token",
    "dashboard_token",
    envvar="TASKQ_DASHBOARD_TOKEN",
    metavar="TOKEN",
    help="asked of every browser and script; required to listen beyond loopback "
    "[env TASKQ_DASHBOARD_TOKEN]",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar="TASKQ_DASHBOARD_ALLOWED_HOSTS",
    metavar="NAME[:PORT]",
    help="another host browsers reach it by (a reverse proxy's, a DNS name); requests naming "
    "any other host than its own address are refused; repeatable "
    "[env TASKQ_DASHBOARD_ALLOWED_HOSTS, space-separated]",
)
@pass_ctx
def dashboard(
    ctx: Context,
    host: str,
    port: int,
    read_only: bool,
    dashboard_token: str | None,
    allowed_hosts: tuple[str, ...],
) -> None:
    """Serve the web dashboard: queues, tasks, workers, dead letters, schedules and
    workflows, live, with their actions. It reads and acts with the global connection
    options, like every command; any number can run (it keeps no state)."""
    if not installed():
        raise click.ClickException("the dashboard needs its extra: pip install 'taskq[dashboard]'")
    from taskq.dashboard.config import DashboardConfig, DashboardError, UnsafeBind
    from taskq.dashboard.serve import run
    from taskq.errors import ConfigError

    token = dashboard_token or None
    try:
        config = DashboardConfig(ctx.settings(), host, port, read_only, token, allowed_hosts)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None

    def announce(url: str) -> None:
        mode = " read-only" if read_only else ""
        click.echo(f"taskq dashboard{mode} at {url} (Ctrl-C to stop)")

    try:
        run_async(run(config, announce))
    except UnsafeBind as exc:
        raise click.UsageError(str(exc)) from None
    except DashboardError as exc:
        raise click.ClickException(exc.message) from None
