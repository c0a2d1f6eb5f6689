"""The `taskq` command: the root group, its global options, and `main()`.

Exit codes: 0 success, 1 runtime error (one line on stderr), 2 usage error (one line).
Every command is registered here, in COMMANDS, by where it is defined: only the one run is
imported (a `taskq worker` skips the other commands' modules, ~0.2 s of CPU per process),
and `taskq --help` imports them all to list them.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from taskq.cli.common import Context, run_async, security_options
from taskq.errors import ConfigError, ConnectError, TaskqError

__all__ = ["cli", "main", "run_async"]  # run_async: re-exported for bench/spark.py

COMMANDS = {  # name: where its click command is (module:attribute)
    "server": "taskq.cli.server:server",
    "worker": "taskq.cli.worker:worker",
    "enqueue": "taskq.cli.enqueue:enqueue",
    "demo": "taskq.cli.demo:demo",
    "queues": "taskq.cli.queues:queues",
    "result": "taskq.cli.results:result",
    "schedules": "taskq.cli.schedules:schedules",
    "dlq": "taskq.cli.dlq:dlq",
    "workers": "taskq.cli.workers:workers",
    "cancel": "taskq.cli.tasks:cancel",
    "task": "taskq.cli.tasks:task",
    "tasks": "taskq.cli.task_list:tasks",
    "workflows": "taskq.cli.workflows:workflows",
    "limits": "taskq.cli.limits:limits",
    "dashboard": "taskq.cli.dashboard:dashboard",
    "exporter": "taskq.cli.exporter:exporter",
    "new-key": "taskq.cli.keys:new_key_command",
    "doctor": "taskq.cli.doctor:doctor",
    "provision": "taskq.cli.provision:provision",
    "outbox": "taskq.cli.outbox:outbox",
    "history": "taskq.cli.history:history",
}


class Commands(click.Group):
    """The root group: its subcommands imported from COMMANDS when first looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is not None and cmd_name not in self.commands:
            module, _, attribute = where.partition(":")
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command), where
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
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
