"""`taskq worker`: a Worker under signal control.

First SIGTERM/SIGINT: stop fetching, let running tasks finish within the grace period, NAK
those still running at its end for immediate redelivery elsewhere, flush, exit 0. A second
signal exits at once; that is still safe, since unacked messages return after ack_wait.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable

from taskq.app import App
from taskq.workers.limits import Limits
from taskq.workers.logs import BufferedStreamHandler
from taskq.workers.otel import configure_from_env
from taskq.workers.recycle import recycle_when_due
from taskq.workers.tether import tethers
from taskq.workers.worker import Worker

log = logging.getLogger("taskq.worker")


async def serve(
    app: App,
    queues: list[str] | None,
    *,
    concurrency: int = 16,
    grace: float = 30.0,
    pool_size: int | None = None,
    max_tasks: int | None = None,
    max_memory_mb: float | None = None,
    metrics_port: int | None = None,
    outbox: str | None = None,
) -> None:
    """Run a Worker of `app` until a signal (or a recycle: `max_tasks` settled tasks or
    `max_memory_mb` of RSS), serving Prometheus metrics on `metrics_port` if given, and
    relaying the outbox in the database at `outbox` if given; the caller owns (and
    closes) the connection."""
    configure_from_env(metrics_port)  # OpenTelemetry SDK, only if OTEL_* or the port asks
    limits = Limits(max_tasks, max_memory_mb)  # for this process and its pool's, each alone
    worker = _worker(app, queues, concurrency, grace, pool_size, limits)
    _handle_signals(worker, grace)
    handler = _buffered_handler()
    helpers = tethers(worker)  # ready notice and orphan watch, under a supervisor
    if handler is not None:
        helpers.append(asyncio.create_task(_flush_every(handler)))
    if limits:
        helpers.append(asyncio.create_task(recycle_when_due(worker, limits)))
    stop_relay = await _relay(app, outbox)
    try:
        await worker.run()
    finally:
        for helper in helpers:
            helper.cancel()
        await stop_relay()  # the relay stops with the worker, its pass under way done
        if handler is not None:
            handler.flush_now()


def _worker(
    app: App,
    queues: list[str] | None,
    concurrency: int,
    grace: float,
    pool_size: int | None,
    limits: Limits,
) -> Worker:
    """The Worker `taskq worker` runs: a recycled process (`max_tasks`) fetches its N
    deliveries and no more."""
    return Worker(
        app,
        queues,
        concurrency=concurrency,
        grace=grace,
        pool_size=pool_size,
        limits=limits,
        fetch_budget=limits.max_tasks,
    )


def _buffered_handler() -> BufferedStreamHandler | None:
    handlers = logging.getLogger("taskq").handlers
    return next((h for h in handlers if isinstance(h, BufferedStreamHandler)), None)


async def _relay(app: App, url: str | None) -> Callable[[], Awaitable[None]]:
    """Start the outbox relay beside the worker (`--outbox URL`) once its database
    answers (OutboxDatabaseError before the worker starts when it does not); what stops it."""
    if url is None:
        return _nothing
    from taskq.outbox import load

    relay = load("relay").Relay(app, url)
    job = asyncio.create_task(relay.run())
    ready = asyncio.create_task(relay.ready.wait())
    await asyncio.wait({job, ready}, return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    if job.done():
        job.result()

    async def stop() -> None:
        relay.stop()
        await job

    return stop


async def _nothing() -> None:
    return None


def _handle_signals(worker: Worker, grace: float) -> None:
    """First SIGTERM/SIGINT: a graceful stop; a second one: exit now."""
    signals = {"count": 0}

    def on_signal(signum: int) -> None:
        signals["count"] += 1
        if signals["count"] > 1:
            log.warning("second signal: exiting now (unacked tasks return after ack_wait)")
            os._exit(1)
        log.info(
            "%s received: finishing running tasks (grace %.0fs)", signal.Signals(signum).name, grace
        )
        worker.stop()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)


async def _flush_every(handler: BufferedStreamHandler | None, interval: float = 0.5) -> None:
    """Flush buffered log lines of a quiet worker, so none wait for the next task."""
    while handler is not None:
        await asyncio.sleep(interval)
        handler.flush_now()
