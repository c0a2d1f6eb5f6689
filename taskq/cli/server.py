"""`taskq server`: an embedded JetStream nats-server in the foreground, for development."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from taskq.server import Edge, EmbeddedServer


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
@click.option("--domain", metavar="NAME", help="the JetStream domain (a hub's: `hub`)")
@click.option(
    "--leafnodes-port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="let edge sites attach here (7422 is usual); docs/edge.md",
)
@click.option("--hub", metavar="URL", help="run a site attached to this hub (nats-leaf://H:P)")
@click.option("--site", metavar="NAME", help="with --hub: the site's name (its domain)")
def server(
    port: int,
    host: str,
    store_dir: str,
    config: str | None,
    sync: str,
    monitor_port: int | None,
    domain: str | None,
    leafnodes_port: int | None,
    hub: str | None,
    site: str | None,
) -> None:
    """Run an embedded JetStream nats-server in the foreground (for development), or a
    hub or site of an edge topology (docs/edge.md)."""
    from taskq.errors import ConfigError
    from taskq.server import EmbeddedServer, sync_setting

    try:
        interval = None if config else sync_setting(sync)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--sync") from None
    edge = _edge(domain, leafnodes_port, hub, site, config)
    monitoring = ("-m", str(monitor_port)) if monitor_port else ()
    embedded = EmbeddedServer(
        port=port,
        host=host,
        store_dir=store_dir,
        config=config,
        sync=interval,
        extra_args=monitoring,
        edge=edge,
    )
    _run(embedded, store_dir, interval, host, monitor_port)


def _run(
    embedded: EmbeddedServer, store: str, interval: str | None, host: str, monitor: int | None
) -> None:
    """Run the server in the foreground until it exits or a signal stops it."""
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)
        if embedded.process is not None:
            embedded.process.terminate()

    # installed before the child starts, so an early SIGTERM still stops it cleanly
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _announce(embedded.url, store, interval, host, monitor)
    edge = embedded.edge
    if edge.domain:
        click.echo(
            f"taskq: JetStream domain {edge.domain}"
            + (f", a site of {edge.hub}" if edge.hub else "")
        )
    if edge.leaf_port:
        click.echo(f"taskq: sites attach at nats-leaf://{host}:{edge.leaf_port}")
    proc = embedded.spawn(foreground_output=True)
    code = proc.wait()
    embedded.stop()  # removes the generated config
    sys.exit(0 if stopping else code)


def _edge(
    domain: str | None, leaf_port: int | None, hub: str | None, site: str | None, config: str | None
) -> Edge | None:
    """The server's edge part from the flags; a usage error (exit 2) for what cannot be."""
    from taskq.errors import ConfigError
    from taskq.server import Edge, hub_url
    from taskq.topology.names import check_site

    if not (domain or leaf_port or hub or site):
        return None
    if config:
        raise click.UsageError("--domain, --leafnodes-port, --hub and --site go in --config's file")
    if bool(hub) != bool(site):
        raise click.UsageError("--hub and --site go together: a site has a name and a hub")
    try:
        if site:
            check_site(site)
            if domain and domain != site:
                raise click.UsageError(f"a site's domain is its name: --domain {site} or none")
        if domain:
            check_site(domain)
        url = hub_url(hub) if hub else None
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None
    return Edge(domain=site or domain, leaf_port=leaf_port, hub=url)


def _announce(url: str, store: str, interval: str | None, host: str, monitor: int | None) -> None:
    """What is starting, and where doctor finds its monitoring endpoint."""
    synced = f"sync {interval}" if interval else "sync as configured"
    click.echo(f"taskq: starting nats-server on {url} (store {store}, {synced}); Ctrl-C stops")
    if monitor:
        endpoint = f"http://{host}:{monitor}"
        click.echo(f"taskq: monitoring on {endpoint} (taskq doctor --monitor {endpoint})")
