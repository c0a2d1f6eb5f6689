"""`taskq worker MODULE:APP`: consume and run the tasks of an App."""

from __future__ import annotations

import logging

import click

from taskq.cli.common import Context, pass_ctx


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("-q", "--queue", "queues", multiple=True, help="queue to consume (repeatable)")
@click.option("-c", "--concurrency", type=click.IntRange(1, 10_000), default=16, show_default=True)
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="seconds running tasks get to finish on SIGTERM",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="info: one line per settled task; warning: retries and dead letters only",
)
@pass_ctx
def worker(
    ctx: Context,
    app_spec: str,
    queues: tuple[str, ...],
    concurrency: int,
    grace: float,
    log_level: str,
) -> None:
    """Run a worker for the tasks of MODULE:APP."""
    from taskq.workers.logs import install
    from taskq.workers.serve import serve

    app = ctx.app(app_spec)
    install(min(getattr(logging, log_level.upper()), logging.getLogger().level))  # -vv: debug
    ctx.run(
        lambda _client: serve(app, list(queues) or None, concurrency=concurrency, grace=grace),
        app=app,
    )
