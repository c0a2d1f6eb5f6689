"""The sweeper: moves crash-looped messages into the DLQ.

When a queue consumer reaches `max_deliver`, the message stays in the work-queue stream and
the server emits a MAX_DELIVERIES advisory (when the consumer next receives a pull). The
`<PREFIX>_EVENTS` stream captures those advisories durably, so none is missed while no worker
runs. Every worker sweeps on one shared durable consumer, so each advisory is handled once:
read the message by sequence, write its dead letter (acknowledged), delete the original,
then ack the advisory. Each step is idempotent, so a sweeper dying midway is harmless.
"""

from __future__ import annotations

import asyncio
import json
import logging

from dlq.record import ErrorInfo, make_record, publish_record
from taskq.app import App
from taskq.envelope import MSG_ID, decode
from taskq.errors import DecodeError, TaskqError, TransientError
from taskq.jetstream import Broker, Delivery, StoredMessage
from taskq.retrying import retry_transient
from taskq.topology import events_consumer

log = logging.getLogger("taskq.dlq")


async def run_sweeper(app: App, broker: Broker, stopping: asyncio.Event) -> None:
    """Sweep advisories until `stopping` is set; never raises."""
    names = app.names
    try:
        await retry_transient(
            lambda: broker.ensure_consumer(events_consumer(names)), what="sweeper set-up"
        )
        puller = await broker.pull(names.events_stream, names.events_consumer)
    except TaskqError as exc:
        log.warning("sweeper not started: %s", exc)
        return
    try:
        while not stopping.is_set():
            try:
                async for advisory in puller.stream(16, 1.0):
                    await sweep_one(app, broker, advisory)
            except TaskqError as exc:
                log.warning("sweeper: %s", exc)
                await asyncio.sleep(1.0)
    finally:
        await puller.close()


async def sweep_one(app: App, broker: Broker, advisory: Delivery) -> None:
    """Dead-letter the message one MAX_DELIVERIES advisory points at, then ack it."""
    try:
        event = json.loads(advisory.data)
        stream, seq = str(event["stream"]), int(event["stream_seq"])
        deliveries = int(event.get("deliveries", 0))
    except (ValueError, KeyError, TypeError):
        await advisory.ack()  # not an advisory we understand: nothing to move
        return
    try:
        stored = await broker.get_msg(stream, seq)
        if stored is not None:
            await _move(app, broker, stream, stored, deliveries)
    except TransientError:
        await advisory.nak(2.0)  # try again shortly; every step is idempotent
        return
    await advisory.ack()


async def _move(
    app: App, broker: Broker, stream: str, stored: StoredMessage, deliveries: int
) -> None:
    names = app.names
    parsed = names.parse_queue_subject(stored.subject)
    if parsed is None:  # a schedule or foreign subject: not a task message
        return
    queue, subject_task = parsed
    try:
        envelope = decode(
            stored.data,
            subject_task=subject_task,
            msg_id=stored.headers.get(MSG_ID),
            seq=stored.seq,
        )
    except DecodeError:
        envelope = None
    record = make_record(
        envelope=envelope,
        raw=stored.data,
        reason="crashed",
        error=ErrorInfo(
            type="MaxDeliveriesReached",
            message=f"delivered {deliveries} times (the consumer's max_deliver) without "
            "being settled: the worker died or hung on every attempt",
        ),
        attempts=deliveries,
        queue=queue,
        original_seq=stored.seq,
    )
    await publish_record(
        broker, names, record, envelope.task if envelope else subject_task, stored.data
    )
    await broker.delete_msg(stream, stored.seq)
    log.error("swept %s[%s] into the DLQ after %d deliveries", record.task, record.id, deliveries)
