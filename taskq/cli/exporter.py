"""`taskq exporter`: queue depth, consumer lag and dead letters as a Prometheus scrape target.

Workers count what they do (`taskq worker --metrics-port`); what waits in a queue is the
server's to say, and every worker would report the same figure, so one exporter process reads
it from the server at each scrape (`taskq.operate.queue_stats`, what `taskq queues` shows) and
serves it with prometheus_client, the same HTTP server and text format as the workers' `/metrics`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import signal
from collections.abc import Callable, Iterator
from typing import Any

import click

from taskq.cli.common import Context, pass_ctx
from taskq.client import Client
from taskq.operate.queue_stats import QueueStats, snapshot

log = logging.getLogger("taskq.exporter")

SCRAPE_TIMEOUT = 10.0  # seconds: Prometheus's own default scrape timeout
# metric name suffix -> (help, the QueueStats figure)
GAUGES: dict[str, tuple[str, Callable[[QueueStats], float]]] = {
    "waiting": (
        "tasks stored and not yet delivered: the consumer's lag (num_pending)",
        lambda s: s.waiting,
    ),
    "runnable": (
        "tasks a new worker could start now (waiting, not paused; not running, retry-delayed, "
        "held or scheduled): the autoscaling signal",
        lambda s: s.runnable,
    ),
    "in_flight": (
        "tasks delivered and not yet settled: running, or waiting out a retry delay",
        lambda s: s.in_flight,
    ),
    "redelivered": ("tasks delivered more than once, not yet settled", lambda s: s.redelivered),
    "pull_requests": ("open pull requests: roughly, idle worker slots", lambda s: s.pulls_waiting),
    "consumers": ("consumers on the queue's stream", lambda s: s.consumers),
    "dead_letters": ("records in the dead-letter stream for this queue", lambda s: s.dead),
    "paused": ("1 while the queue is paused (taskq queues pause)", lambda s: float(s.paused)),
    "partitions": ("streams the queue is stored in", lambda s: s.partitions),
}


class QueueCollector:
    """A prometheus_client collector: one `snapshot` per scrape, run on the exporter's event
    loop (scrapes arrive on prometheus_client's server thread)."""

    def __init__(
        self, client: Client, loop: asyncio.AbstractEventLoop, queues: list[str] | None
    ) -> None:
        self.client = client
        self.loop = loop
        self.queues = queues

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        future = asyncio.run_coroutine_threadsafe(snapshot(self.client, self.queues, 0), self.loop)
        stats = future.result(SCRAPE_TIMEOUT)  # an error answers the scrape with HTTP 500
        prefix = self.client.names.prefix
        for suffix, (help_text, figure) in GAUGES.items():
            gauge = GaugeMetricFamily(
                f"taskq_queue_{suffix}", help_text, labels=["taskq_prefix", "taskq_queue"]
            )
            for s in stats:
                gauge.add_metric([prefix, s.queue], float(figure(s)))
            yield gauge
        yield _per_queue(
            prefix,
            stats,
            ("taskq_queue_stored", "messages stored per task (waiting and in flight)", "task"),
            lambda s: s.per_task,
        )
        yield _per_queue(
            prefix,
            stats,
            (
                "taskq_queue_partition_runnable",
                "tasks a new worker could start now, per partition stream ('none': the "
                "queue's unpartitioned stream), for a Deployment that serves some partitions",
                "partition",
            ),
            lambda s: s.runnable_by_partition,
        )
        yield from self._relays(prefix)

    def _relays(self, prefix: str) -> Iterator[Any]:
        """The outbox relays' last reports (taskq.records.relays): backlog, oldest age."""
        from prometheus_client.core import GaugeMetricFamily

        from taskq.records.relays import list_relays

        future = asyncio.run_coroutine_threadsafe(list_relays(self.client), self.loop)
        reports = future.result(SCRAPE_TIMEOUT)
        labels = ["taskq_prefix", "relay"]
        backlog = GaugeMetricFamily(
            "taskq_outbox_backlog", "outbox rows waiting, as a relay last read them", labels=labels
        )
        oldest = GaugeMetricFamily(
            "taskq_outbox_oldest_age_seconds",
            "age of the oldest outbox row waiting, as a relay last read it",
            labels=labels,
        )
        for report in reports:
            backlog.add_metric([prefix, report.relay], float(report.backlog))
            oldest.add_metric([prefix, report.relay], report.oldest_age)
        yield backlog
        yield oldest


def _per_queue(
    prefix: str,
    stats: list[QueueStats],
    family: tuple[str, str, str],
    counts: Callable[[QueueStats], dict[str, int]],
) -> Any:
    """A gauge family (name, help, the label below the queue: `taskq_<label>`) of a count
    per queue and per key of `counts(stats)` (a task, a partition)."""
    from prometheus_client.core import GaugeMetricFamily

    name, help_text, label = family
    gauge = GaugeMetricFamily(
        name, help_text, labels=["taskq_prefix", "taskq_queue", f"taskq_{label}"]
    )
    for s in stats:
        for key, count in counts(s).items():
            gauge.add_metric([prefix, s.queue, key], float(count))
    return gauge


@click.command()
@click.option("--host", default="0.0.0.0", show_default=True, help="address to listen on")
@click.option("--port", type=click.IntRange(1, 65535), default=9109, show_default=True)
@click.option("-q", "--queue", "queues", multiple=True, help="only these queues (repeatable)")
@pass_ctx
def exporter(ctx: Context, host: str, port: int, queues: tuple[str, ...]) -> None:
    """Serve every queue's depth, lag, in-flight and dead-letter counts on /metrics for
    Prometheus, read from the server at each scrape, until Ctrl-C or SIGTERM."""
    if importlib.util.find_spec("prometheus_client") is None:
        raise click.UsageError("the exporter needs its extra: pip install 'taskq[prometheus]'")
    ctx.run(lambda client: _serve(client, host, port, list(queues) or None))


async def _serve(client: Client, host: str, port: int, queues: list[str] | None) -> None:
    from prometheus_client import CollectorRegistry, start_http_server

    from taskq.workers.otel import MetricsPortError

    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(client, asyncio.get_running_loop(), queues))
    try:
        server, _thread = start_http_server(port, host, registry=registry)
    except OSError as exc:
        raise MetricsPortError(port, exc.strerror or str(exc)) from None
    click.echo(f"serving queue metrics on http://{host}:{port}/metrics", err=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        server.shutdown()
