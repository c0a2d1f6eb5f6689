"""The `taskq` command line.

Exit codes: 0 success, 1 runtime error (one line on stderr), 2 usage error (one line).
`workers` and `dlq` are imported inside the commands that need them (DESIGN §2).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from taskq.app import App
from taskq.errors import ArgumentsError, ConfigError, ConnectError, TaskqError
from taskq.settings import Settings

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when it is installed (faster I/O), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def load_app(spec: str) -> App:
    """Import `module:attribute` (the cwd is importable) and return the App it names."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise click.BadParameter(f"{spec!r} is not MODULE:APP", param_hint="APP")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="APP"
        ) from None
    candidates = [attr] if attr else ["app"]
    for name in candidates:
        app = getattr(module, name, None)
        if isinstance(app, App):
            return app
    raise click.BadParameter(
        f"{module_name!r} has no taskq App named {candidates[0]!r}", param_hint="APP"
    )


class Context:
    """Global options shared by every command (connection and security settings)."""

    def __init__(self, url: str | None, prefix: str | None, **security: str | None) -> None:
        self.url = url
        self.prefix = prefix
        self.security = {k: v for k, v in security.items() if v is not None}

    def app(self, spec: str | None = None) -> App:
        app = load_app(spec) if spec else App()
        app.configure(url=self.url, prefix=self.prefix, **self.security)
        return app

    def settings(self) -> Settings:
        return Settings.load(url=self.url, prefix=self.prefix, **self.security)


SECURITY_OPTIONS = (
    ("--user", "user", "TASKQ_USER"),
    ("--password", "password", "TASKQ_PASSWORD"),
    ("--token", "token", "TASKQ_TOKEN"),
    ("--nkey-seed", "nkey_seed", "TASKQ_NKEY_SEED"),
    ("--creds", "creds", "TASKQ_CREDS"),
    ("--tls-ca", "tls_ca", "TASKQ_TLS_CA"),
    ("--tls-cert", "tls_cert", "TASKQ_TLS_CERT"),
    ("--tls-key", "tls_key", "TASKQ_TLS_KEY"),
)


def security_options(fn: Any) -> Any:
    """The connection-security flags; each falls back to its TASKQ_* variable."""
    for flag, dest, env in reversed(SECURITY_OPTIONS):
        fn = click.option(flag, dest, metavar="VALUE", help=f"[env {env}]")(fn)
    return fn


pass_ctx = click.make_pass_decorator(Context)


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


@cli.command()
@click.option("--port", type=click.IntRange(1, 65535), default=4222, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--store-dir", type=click.Path(file_okay=False), default=".taskq/store", show_default=True
)
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="nats-server config")
def server(port: int, host: str, store_dir: str, config: str | None) -> None:
    """Run an embedded JetStream nats-server in the foreground (for development)."""
    from taskq.server import EmbeddedServer

    embedded = EmbeddedServer(port=port, host=host, store_dir=store_dir, config=config)
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)
        if embedded.process is not None:
            embedded.process.terminate()

    # installed before the child starts, so an early SIGTERM still stops it cleanly
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    click.echo(f"taskq: starting nats-server on {embedded.url} (store {store_dir}); Ctrl-C stops")
    proc = embedded.spawn(foreground_output=True)
    code = proc.wait()
    sys.exit(0 if stopping else code)


@cli.command()
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
    from workers.logs import install
    from workers.serve import serve

    app = ctx.app(app_spec)
    install(min(getattr(logging, log_level.upper()), logging.getLogger().level))  # -vv: debug
    run_async(serve(app, list(queues) or None, concurrency=concurrency, grace=grace))


@cli.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("task_name", metavar="TASK")
@click.argument("json_args", metavar="[JSON_ARGS]", required=False)
@click.option("--key", help="idempotency key (Nats-Msg-Id): the same key enqueues once")
@click.option("--partition-key", help="on a partitioned queue: the same key, the same partition")
@click.option("--queue", help="override the task's queue")
@click.option("--json", "as_json", is_flag=True, help="print the handle as JSON")
@pass_ctx
def enqueue(
    ctx: Context,
    app_spec: str,
    task_name: str,
    json_args: str | None,
    key: str | None,
    partition_key: str | None,
    queue: str | None,
    as_json: bool,
) -> None:
    """Enqueue TASK with JSON_ARGS: a JSON array (positional) or object (keyword)."""
    app = ctx.app(app_spec)
    task = app.tasks.get(task_name)
    if task is None:
        known = ", ".join(sorted(app.tasks)) or "none"
        raise click.BadParameter(f"no task {task_name!r} (known: {known})", param_hint="TASK")
    args, kwargs = parse_json_args(json_args)
    call = task.options(key=key, partition_key=partition_key, queue=queue)

    async def go() -> Any:
        try:
            return await call.enqueue(*args, **kwargs)
        except ArgumentsError as exc:  # the user's JSON_ARGS do not fit the signature
            raise click.BadParameter(str(exc), param_hint="JSON_ARGS") from None
        finally:
            await app.aclose()

    handle = run_async(go())
    if as_json:
        click.echo(
            json.dumps(
                {
                    "id": handle.id,
                    "task": handle.task,
                    "queue": handle.queue,
                    "seq": handle.seq,
                    "duplicate": handle.duplicate,
                }
            )
        )
    else:
        note = " (duplicate: already enqueued)" if handle.duplicate else ""
        click.echo(f"{handle.id}{note}")


def parse_json_args(text: str | None) -> tuple[list[Any], dict[str, Any]]:
    if not text:
        return [], {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="JSON_ARGS") from None
    if isinstance(value, list):
        return value, {}
    if isinstance(value, dict):
        return [], value
    return [value], {}


@cli.command()
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


# Modules that contribute commands through a `COMMANDS` list; each is owned by one feature.
COMMAND_MODULES = (
    "dlq.cli",  # taskq dlq ...
    "taskq.commands.results",  # taskq result ...
    "taskq.commands.schedules",  # taskq schedules ...
    "taskq.commands.queues",  # taskq queues ...
)


def _register_subcommands() -> None:
    """Attach commands that live in other modules (kept small and separate)."""
    for module in COMMAND_MODULES:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        for command in getattr(mod, "COMMANDS", ()):
            if command.name not in cli.commands:
                cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one-line errors, exit 2 for usage, 1 for runtime failures."""
    _register_subcommands()
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
