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
def demo(burst: int, no_spark: bool) -> None:
    """Start an embedded server and a worker, run a few tasks (a retry, a dead letter, a
    Spark job and a Spark batch on a local SparkSession)."""
    from taskq.demo import run_demo

    sys.exit(run_demo(burst, spark=not no_spark))
