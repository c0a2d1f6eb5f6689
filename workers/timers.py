"""Moving what a queue's schedules fired into the queue.

A schedule's target must be in its own stream (ADR-51), and schedules live in the queue's
timer stream (taskq.schedules), so the server fires a task onto its fired subject there;
every worker of the queue runs this loop on one shared durable consumer, which publishes
each fired task to its queue subject and then acknowledges it. The publish carries
`Nats-Msg-Id` `fired:<stream>:<seq>`: a move retried after a crash is deduplicated, so a
fired task enters its queue once. Moving needs no task slot: it runs beside the tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from taskq.client import Client
from taskq.envelope import MSG_ID
from taskq.errors import NotFound, TaskqError
from taskq.flowcontrol.held import FIRED, carried
from taskq.nats import Delivery, Puller

log = logging.getLogger("taskq.worker")
BATCH = 256
LINGER = 1.0  # seconds a pull request waits for fired tasks


async def run_mover(client: Client, queue: str, stopping: asyncio.Event) -> None:
    """Move fired tasks of `queue` until `stopping` is set."""
    names = client.names
    stream, durable = names.timer_stream(queue), names.timer_consumer(queue)
    puller: Puller | None = None
    while not stopping.is_set():
        try:
            if puller is None:
                puller = await client.connection.pull(stream, durable)
            fired = [d async for d in puller.stream(BATCH, LINGER)]
            await asyncio.gather(*(move(client, d) for d in fired))
        except TaskqError as exc:
            log.warning("moving fired tasks of queue %s failed: %s", queue, exc)
            if isinstance(exc, NotFound) and puller is not None:
                await puller.close()
                puller = None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=0.5)
    if puller is not None:
        await puller.close()


async def move(client: Client, d: Delivery) -> None:
    """Publish one fired task to its queue subject, then acknowledge it (a failure leaves
    it to come back after the consumer's ack_wait)."""
    target = client.names.unfired(d.subject)
    if target is None:  # nothing a schedule of ours fires: nowhere to move it
        log.warning("dropping %s from %s: not a fired task subject", d.subject[:100], d.stream)
        await d.term("not a fired task subject")
        return
    headers = {**carried(d.raw_headers), FIRED: str(d.seq), MSG_ID: f"fired:{d.stream}:{d.seq}"}
    try:
        await client.connection.publish(target, d.data, headers)
    except TaskqError as exc:
        log.warning("moving a fired task to %s failed (it comes back): %s", target, exc)
        return
    await d.ack()
