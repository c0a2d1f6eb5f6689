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
