"""The `taskq` command: the root group, its global options, and `main()`.

Exit codes: 0 success, 1 runtime error (one line on stderr), 2 usage error (one line).
Every command is registered here explicitly; `workers`, Spark and the demo are imported
inside the commands that need them (docs/architecture.md), so `taskq --help` stays fast.
"""

from __future__ import annotations

import logging
import sys

import click

from taskq.cli.common import Context, run_async, security_options
from taskq.cli.dashboard import dashboard
from taskq.cli.demo import demo
from taskq.cli.dlq import dlq
from taskq.cli.doctor import doctor
from taskq.cli.enqueue import enqueue
from taskq.cli.exporter import exporter
from taskq.cli.keys import new_key_command
from taskq.cli.limits import limits
from taskq.cli.provision import provision
from taskq.cli.queues import queues
from taskq.cli.results import result
from taskq.cli.schedules import schedules
from taskq.cli.server import server
from taskq.cli.task_list import tasks
from taskq.cli.tasks import cancel, task
from taskq.cli.worker import worker
from taskq.cli.workers import workers
from taskq.cli.workflows import workflows
from taskq.errors import ConfigError, ConnectError, TaskqError

__all__ = ["cli", "main", "run_async"]  # run_async: re-exported for bench/spark.py


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url", metavar="URL", help="NATS server URL(s) [env TASKQ_URL; nats://127.0.0.1:4222]"
)
@click.option(
    "--prefix", metavar="P", help="name prefix of all streams/subjects [env TASKQ_PREFIX; taskq]"
)
@click.option("-v", "--verbose", count=True, help="more logging (-vv for debug)")
@security_options
@click.version_option(package_name="taskq", prog_name="taskq")
@click.pass_context
def cli(
    ctx: click.Context,
    /,
    url: str | None,
    prefix: str | None,
    verbose: int,
    **security: str | None,
) -> None:
    """taskq: Python tasks on NATS JetStream."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx.obj = Context(url, prefix, **security)


cli.add_command(server)
cli.add_command(worker)
cli.add_command(enqueue)
cli.add_command(demo)
cli.add_command(queues)
cli.add_command(result)
cli.add_command(schedules)
cli.add_command(dlq)
cli.add_command(workers)
cli.add_command(cancel)
cli.add_command(task)
cli.add_command(tasks)
cli.add_command(workflows)
cli.add_command(limits)
cli.add_command(dashboard)
cli.add_command(exporter)
cli.add_command(new_key_command)
cli.add_command(doctor)
cli.add_command(provision)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one-line errors, exit 2 for usage, 1 for runtime failures."""
    try:
        code = cli.main(args=argv, prog_name="taskq", standalone_mode=False)
    except click.UsageError as exc:
        where = f"{exc.ctx.command_path}: " if exc.ctx else "taskq: "
        click.echo(f"{where}{exc.format_message()}", err=True)
        sys.exit(2)
    except click.Abort:
        click.echo("taskq: aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        click.echo(f"taskq: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except ConnectError as exc:
        click.echo(f"taskq: {exc}", err=True)
        sys.exit(1)
    except ConfigError as exc:  # a bad name or setting given by the user: a usage error
        click.echo(f"taskq: {exc}", err=True)
        sys.exit(2)
    except TaskqError as exc:
        click.echo(f"taskq: error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
