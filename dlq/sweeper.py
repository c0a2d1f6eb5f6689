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
from collections import defaultdict

from taskq.client import Client
from taskq.dlq.record import ErrorInfo, make_record
from taskq.dlq.write import publish_record
from taskq.errors import DecodeError, TaskqError, TransientError
from taskq.nats import Delivery, StoredMessage
from taskq.records.envelope import MSG_ID, decode
from taskq.retrying import retry_transient
from taskq.topology.specs import events_consumer

log = logging.getLogger("taskq.dlq")
# (queue, task, verdict) -> run times: the worker's history feed (workers/history.py)
Swept = defaultdict[tuple[str, str, str], list[float]]


async def run_sweeper(
    client: Client, stopping: asyncio.Event, swept: Swept | None = None, linger: float = 1.0
) -> None:
    """Sweep advisories until `stopping` is set; never raises. Each task moved to the DLQ
    is noted in `swept` (the worker's history feed: a dead letter of its queue). `linger`:
    how long one pull request waits for advisories (the worker's fetch timeout), which is
    how long stopping may wait for the open one."""
    names, connection = client.names, client.connection
    try:
        await retry_transient(
            lambda: connection.streams.ensure_consumer(events_consumer(names)),
            what="sweeper set-up",
        )
        puller = await connection.pull(names.events_stream, names.events_consumer)
    except TaskqError as exc:
        log.warning("sweeper not started: %s", exc)
        return
    try:
        while not stopping.is_set():
            try:
                async for advisory in puller.stream(16, linger):
                    await _sweep_guarded(client, advisory, swept)
            except TaskqError as exc:
                log.warning("sweeper: %s", exc)
                await asyncio.sleep(client.settings.timings.loop_retry)
            except Exception:  # every worker's sweeper shares the consumer: never end one
                log.exception("sweeper: unexpected error; going on")
                await asyncio.sleep(client.settings.timings.loop_retry)
    finally:
        await puller.close()


# An advisory whose handling raised an untyped exception: our code failing on that message
# (errors of the broker are typed TaskqErrors, which leave it to come back after ack_wait,
# as a server refusing or gone is expected to pass). One more try after a pause covers a
# passing fault; after GIVE_UP_AFTER deliveries it is terminated rather than NAKed again:
# the same input fails the same way, and retrying it forever would only log the same
# traceback forever. The log names the message, left in its stream, for an operator.
GIVE_UP_AFTER = 3
RETRY_DELAY = 30.0


async def _sweep_guarded(client: Client, advisory: Delivery, swept: Swept | None) -> None:
    """`sweep_one`, settling the advisory (see above) when it raises anything untyped."""
    try:
        await sweep_one(client, advisory, swept)
    except TaskqError:
        raise
    except Exception as exc:
        where = _pointed_at(advisory.data)
        if advisory.num_delivered < GIVE_UP_AFTER:
            log.exception(
                "sweeper: moving %s into the DLQ failed (advisory delivery %d); retrying in %gs",
                where,
                advisory.num_delivered,
                RETRY_DELAY,
            )
            await advisory.nak(RETRY_DELAY)
            return
        log.exception(
            "sweeper: moving %s into the DLQ failed %d times; giving up on it: the message "
            "stays in its stream, not delivered again (inspect it with `nats stream get`)",
            where,
            advisory.num_delivered,
        )
        await advisory.term(f"sweeper: {type(exc).__name__}")


def _pointed_at(data: bytes) -> str:
    """`stream STREAM seq N` of an advisory, for the log (what the sweeper could read)."""
    try:
        event = json.loads(data)
        return f"stream {event['stream']} seq {event['stream_seq']}"
    except (ValueError, KeyError, TypeError):
        return "an unreadable advisory"


async def sweep_one(client: Client, advisory: Delivery, swept: Swept | None = None) -> None:
    """Dead-letter the message one MAX_DELIVERIES advisory points at, then ack it."""
    try:
        event = json.loads(advisory.data)
        stream, seq = str(event["stream"]), int(event["stream_seq"])
        deliveries = int(event.get("deliveries", 0))
    except (ValueError, KeyError, TypeError):
        await advisory.ack()  # not an advisory we understand: nothing to move
        return
    try:
        stored = await client.connection.messages.get(stream, seq)
        if stored is not None:
            queue = await _move(client, stream, stored, deliveries)
            if queue is not None and swept is not None:
                swept[(queue, "", "f")].append(-1.0)  # dead-lettered: no run time known
    except TransientError:
        await advisory.nak(2.0)  # try again shortly; every step is idempotent
        return
    await advisory.ack()


async def _move(client: Client, stream: str, stored: StoredMessage, deliveries: int) -> str | None:
    """Write the `crashed` record of a stored task message (acknowledged), then delete it;
    its queue (None: not a task message, left alone)."""
    parsed = client.names.parse_queue_subject(stored.subject)
    if parsed is None:  # a schedule or foreign subject: not a task message
        return None
    queue, subject_task = parsed
    connection = client.connection
    # a claim-checked task's dead letter keeps its body, not a reference to its object
    data = await connection.opened(stored.data, stored.subject, stored.headers)
    try:
        envelope = decode(
            data,
            subject_task=subject_task,
            msg_id=stored.headers.get(MSG_ID),
            seq=stored.seq,
        )
    except DecodeError:
        envelope = None
    record = make_record(
        envelope=envelope,
        raw=data,
        reason="crashed",
        error=ErrorInfo(
            type="MaxDeliveriesReached",
            message=f"delivered {deliveries} times (the consumer's max_deliver) without "
            "being settled: the worker died or hung on every attempt",
        ),
        attempts=deliveries,
        queue=queue,
        original_seq=stored.seq,
        site=client.site,
    )
    task = envelope.task if envelope else subject_task
    await publish_record(client, record, task, data)
    await connection.messages.delete(stream, stored.seq)
    await connection.release_claim(stored.data, stored.subject, stored.headers)
    log.error("swept %s[%s] into the DLQ after %d deliveries", record.task, record.id, deliveries)
    return queue
