"""`taskq server`: an embedded JetStream nats-server in the foreground, for development."""

from __future__ import annotations

import signal
import sys

import click


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=4222, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--store-dir", type=click.Path(file_okay=False), default=".taskq/store", show_default=True
)
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False),
    help="nats-server config (it then sets sync_interval itself)",
)
@click.option(
    "--sync",
    default="always",
    show_default=True,
    metavar="always|DURATION",
    help="JetStream sync_interval: 'always' fsyncs every write before acknowledging it, so "
    "acknowledged tasks survive power loss (measured 1.7-4x fewer tasks/s, still over 1,000/s); "
    "a duration such as 2m (the nats-server default) fsyncs that often and loses what came "
    "since the last fsync on an OS crash or power cut. See docs/operations.md#durability",
)
@click.option(
    "--monitor-port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="serve nats-server's monitoring endpoint (/varz...) on PORT (8222 is usual): "
    "`taskq doctor --monitor http://HOST:PORT` then checks sync, storage and clocks",
)
def server(
    port: int, host: str, store_dir: str, config: str | None, sync: str, monitor_port: int | None
) -> None:
    """Run an embedded JetStream nats-server in the foreground (for development)."""
    from taskq.errors import ConfigError
    from taskq.server import EmbeddedServer, sync_setting

    try:
        interval = None if config else sync_setting(sync)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--sync") from None
    monitoring = ("-m", str(monitor_port)) if monitor_port else ()
    embedded = EmbeddedServer(
        port=port,
        host=host,
        store_dir=store_dir,
        config=config,
        sync=interval,
        extra_args=monitoring,
    )
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)
        if embedded.process is not None:
            embedded.process.terminate()

    # installed before the child starts, so an early SIGTERM still stops it cleanly
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _announce(embedded.url, store_dir, interval, host, monitor_port)
    proc = embedded.spawn(foreground_output=True)
    code = proc.wait()
    embedded.stop()  # removes the generated config
    sys.exit(0 if stopping else code)


def _announce(url: str, store: str, interval: str | None, host: str, monitor: int | None) -> None:
    """What is starting, and where doctor finds its monitoring endpoint."""
    synced = f"sync {interval}" if interval else "sync as configured"
    click.echo(f"taskq: starting nats-server on {url} (store {store}, {synced}); Ctrl-C stops")
    if monitor:
        endpoint = f"http://{host}:{monitor}"
        click.echo(f"taskq: monitoring on {endpoint} (taskq doctor --monitor {endpoint})")
