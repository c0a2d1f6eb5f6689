"""`taskq worker MODULE:APP`: consume and run the tasks of an App.

With `-p N` (or any of `--max-tasks-per-child`, `--max-memory-per-child`, `--reload`, which
imply `-p 1`) this process becomes a supervisor (`taskq.workers.supervise`) that runs this
same command line N times as worker processes; in those, `TASKQ_WORKER_PROCESS` is set and
the command runs one plain worker.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from taskq.app import App
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
    "-p",
    "--processes",
    type=click.IntRange(1, 1024),
    metavar="N",
    help="run N worker processes (each with -c) under a supervisor that restarts any that dies",
)
@click.option(
    "--pool-size",
    type=click.IntRange(1, 1024),
    metavar="N",
    help='child processes for executor="process" tasks [default: the CPU count]',
)
@click.option(
    "--max-tasks-per-child",
    "max_tasks",
    type=click.IntRange(1),
    metavar="N",
    help="replace a worker process (and each pool process) after N tasks (implies -p 1)",
)
@click.option(
    "--max-memory-per-child",
    "max_memory_mb",
    type=click.IntRange(1),
    metavar="MB",
    help="replace a worker process (and each pool process) once its resident memory "
    "reaches MB (implies -p 1)",
)
@click.option(
    "--reload",
    is_flag=True,
    help="development: restart the worker(s) when a .py file under the current directory "
    "changes (implies -p 1)",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="info: one line per settled task; warning: retries and dead letters only",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per line (time, level, task, id, attempt, queue, duration, "
    "outcome, worker)",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="serve Prometheus /metrics on PORT (every interface; with -p N, process i serves "
    "PORT+i-1); needs taskq[prometheus]",
)
@click.option(
    "--wait-for-server",
    "wait_for",
    type=click.FloatRange(0),
    default=0.0,
    metavar="SECONDS",
    help="wait up to SECONDS for the NATS server to answer before giving up (a worker "
    "started before its server, as in a pod, waits instead of exiting at once)",
)
@click.option(
    "--outbox",
    metavar="URL",
    help="also relay MODULE:APP's transactional outbox in the database at URL "
    "(docs/outbox.md); needs taskq[outbox]",
)
@pass_ctx
def worker(
    ctx: Context,
    app_spec: str,
    queues: tuple[str, ...],
    concurrency: int,
    grace: float,
    processes: int | None,
    pool_size: int | None,
    max_tasks: int | None,
    max_memory_mb: int | None,
    reload: bool,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    wait_for: float,
    outbox: str | None,
) -> None:
    """Run a worker for the tasks of MODULE:APP (with -p N: N worker processes)."""
    from taskq.workers.serve import serve
    from taskq.workers.tether import supervised

    in_process, port = supervised(), _metrics_port(metrics_port, processes or 1)
    _install_logs(log_level, log_format, in_process)
    if not in_process and (processes or max_tasks or max_memory_mb or reload):
        _supervise(processes or 1, grace, reload)
    app = _waited(ctx.app(app_spec), wait_for)
    ctx.run(
        lambda _client: serve(
            app,
            list(queues) or None,
            concurrency=concurrency,
            grace=grace,
            pool_size=pool_size,
            max_tasks=max_tasks,
            max_memory_mb=max_memory_mb,
            metrics_port=port,
            outbox=outbox,
        ),
        app=app,
    )


def _install_logs(log_level: str, log_format: str, in_process: bool) -> None:
    from taskq.workers.logs import FORMAT, FORMAT_IN_PROCESS, dump_stacks_on, install

    level = min(getattr(logging, log_level.upper()), logging.getLogger().level)  # -vv: debug
    install(level, FORMAT_IN_PROCESS if in_process else FORMAT, json_lines=log_format == "json")
    dump_stacks_on()  # `kill -USR1 PID`: where a worker that seems stuck waits


def _waited(app: App, seconds: float) -> App:
    """`app`, once its server answers (when `seconds` > 0: ConnectError after them, which
    the CLI reports as any unreachable server)."""
    from taskq.cli.common import run_async
    from taskq.client import wait_for_server

    if seconds > 0:
        run_async(wait_for_server(app.settings, seconds))
    return app


def _metrics_port(port: int | None, processes: int) -> int | None:
    """The port this process serves /metrics on: PORT, or PORT+i-1 in worker process i of
    a supervisor (they share a host, so each needs its own); checked before anything starts."""
    from taskq.workers.otel import prometheus_installed
    from taskq.workers.tether import WORKER_PROCESS

    if port is None:
        return None
    if not prometheus_installed():
        raise click.UsageError("--metrics-port needs its extra: pip install 'taskq[prometheus]'")
    if port + processes - 1 > 65535:
        raise click.BadParameter(
            f"{processes} processes need ports {port}..{port + processes - 1}",
            param_hint="--metrics-port",
        )
    index = os.environ.get(WORKER_PROCESS, "")
    return port + int(index) - 1 if index.isdigit() else port


def _supervise(processes: int, grace: float, reload: bool) -> None:
    """Run this command line as `processes` supervised worker processes; exit with the
    supervisor's status (the options were checked here, MODULE:APP is left to them)."""
    from taskq.workers.supervise import Plan, supervise, worker_command

    if sys.platform == "win32":  # process groups and asyncio signal handlers are POSIX only
        raise click.UsageError("-p, --max-*-per-child and --reload need Linux or macOS")
    code = supervise(Plan(worker_command(), processes, grace, reload))
    click.get_current_context().exit(code)
