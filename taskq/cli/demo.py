"""`taskq demo`: an embedded server, a worker and a few tasks, end to end."""

from __future__ import annotations

import sys

import click


@click.command()
@click.option(
    "--tasks",
    "burst",
    type=click.IntRange(0, 1_000_000),
    default=2000,
    show_default=True,
    help="no-op tasks in the throughput burst",
)
@click.option("--no-spark", is_flag=True, help="skip the Spark tasks (no JVM is started)")
@click.option(
    "--spark-master",
    metavar="URL",
    default="local[2]",
    show_default=True,
    help="where the Spark tasks run: a local session, or a Spark Connect server (sc://HOST:PORT)",
)
@click.option(
    "--dashboard", is_flag=True, help="then keep the system running, served by the dashboard"
)
@click.option(
    "--dashboard-port",
    type=click.IntRange(0, 65535),
    default=8787,
    show_default=True,
    help="the dashboard's port on 127.0.0.1 (0: any free)",
)
def demo(
    burst: int, no_spark: bool, spark_master: str, dashboard: bool, dashboard_port: int
) -> None:
    """Start an embedded server and a worker, run a few tasks (a retry, a dead letter, a
    Spark job and a Spark batch on a local SparkSession, or over Spark Connect with
    --spark-master sc://HOST:PORT). With --dashboard, the system then keeps running (a few
    tasks a second) and `taskq dashboard` serves it until Ctrl-C."""
    from taskq.cli.dashboard import installed
    from taskq.cli.demo_run import run_demo

    if not spark_master.startswith(("local", "sc://")):
        raise click.BadParameter("must be local[N] or a Spark Connect URL sc://HOST:PORT")
    if no_spark and spark_master != "local[2]":
        raise click.UsageError(
            "--spark-master names where the Spark tasks run: not with --no-spark"
        )
    if dashboard and not installed():
        raise click.ClickException("the dashboard needs its extra: pip install 'taskq[dashboard]'")
    port = dashboard_port if dashboard else None
    sys.exit(run_demo(burst, spark=not no_spark, dashboard=port, spark_master=spark_master))
