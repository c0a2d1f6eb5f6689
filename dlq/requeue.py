"""Requeue: send dead letters back to a queue, then remove them from the DLQ.

Each record is republished under a deterministic `Nats-Msg-Id` (`<id>:requeue:<dlq seq>`), and
deleted from the DLQ only after the server acknowledged the publish. Re-running an
interrupted requeue therefore never enqueues a task twice (within the queue's dedup window)
and never loses one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from taskq.client import Client, ClientSource
from taskq.dlq.oversize import discard_blob, original_bytes
from taskq.dlq.record import DeadLetter, EnvelopeOriginal
from taskq.errors import TaskqError
from taskq.ids import safe_id
from taskq.nats import PubAck
from taskq.records.clock import now_iso
from taskq.records.envelope import MSG_ID, TASK_HEADER
from taskq.records.results import encoded, store_encoded
from taskq.states import QUEUED
from taskq.topology.names import check_queue

CHUNK = 256

Pending = list[tuple[DeadLetter, asyncio.Future[PubAck]]]  # records sent, acks to come


@dataclass
class RequeueResult:
    """What a requeue did: how many went back, and which records failed and why."""

    requeued: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)  # (dlq seq, why)


def requeue_id(record: DeadLetter) -> str:
    """The message id of a record's requeue (the same every time it is retried)."""
    # `:` cannot stand in a safe id: no task id a producer picks can equal this one
    return f"{safe_id(record.id)}:requeue:{record.seq}"


async def payload(source: ClientSource, record: DeadLetter) -> bytes:
    """The bytes to publish: the envelope marked `requeued_from`, or the original bytes."""
    message = record.message
    body: bytes
    if isinstance(message, EnvelopeOriginal):
        body = message.requeued(record.seq, record.reason, now_iso()).model_dump_json().encode()
    else:
        body = await original_bytes(source, record)
    return body


async def requeue(
    source: ClientSource,
    records: Iterable[DeadLetter],
    to_queue: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> RequeueResult:
    """Republish `records` (to their queue, or `to_queue`) and delete them from the DLQ."""
    client = await source.client()
    result = RequeueResult()
    pending = list(records)
    for start in range(0, len(pending), CHUNK):
        chunk = pending[start : start + CHUNK]
        await _requeue_chunk(client, chunk, to_queue, result)
        if progress:
            progress(len(chunk))
    return result


async def _requeue_chunk(
    client: Client, chunk: list[DeadLetter], to_queue: str | None, result: RequeueResult
) -> None:
    """Publish a chunk pipelined; once every ack is in, delete the acknowledged records."""
    sends = [s for record in chunk if (s := await _prepared(client, record, to_queue, result))]
    await _mark_queued(client, [record for record, *_ in sends], to_queue)
    waits: Pending = []
    for record, subject, body, headers in sends:
        try:
            waits.append((record, await client.connection.publish_nowait(subject, body, headers)))
        except TaskqError as exc:
            result.failed.append((record.seq, str(exc)))
    acks = await asyncio.gather(*(w for _, w in waits), return_exceptions=True)
    published = [r for (r, _), a in zip(waits, acks, strict=True) if isinstance(a, PubAck)]
    for (record, _), ack in zip(waits, acks, strict=True):
        if not isinstance(ack, PubAck):
            result.failed.append((record.seq, f"publish not acknowledged: {ack}"))
    # only now, with every publish acknowledged, remove the records
    stream = client.names.dlq_stream
    await asyncio.gather(*(client.connection.messages.delete(stream, r.seq) for r in published))
    for record in published:
        await discard_blob(client, record)
    result.requeued += len(published)


async def _mark_queued(client: Client, records: list[DeadLetter], to_queue: str | None) -> None:
    """Each task's record says `queued` before its message goes back (written, and
    acknowledged, first): a `result --wait` at once after the requeue waits for the new run
    instead of returning the dead record, and the run's own records come after this one.
    Only tasks about to be sent are marked (a record that cannot be sent keeps its dead
    one); a mark that fails (a role that may not write records) leaves the dead record. The
    mark carries no call: the story keeps the dead record's."""
    marks = [
        store_encoded(
            client, r.id, encoded({"state": QUEUED, "task": r.task, "queue": to_queue or r.queue})
        )
        for r in records
    ]
    await asyncio.gather(*marks, return_exceptions=True)


async def _prepared(
    client: Client, record: DeadLetter, to_queue: str | None, result: RequeueResult
) -> tuple[DeadLetter, str, bytes, dict[str, str]] | None:
    """What sending one record's task takes (subject, body, headers), or None with why not
    noted in `result`."""
    queue = check_queue(to_queue or record.queue)
    msg_id = requeue_id(record)
    # placed by its id: a requeue run again lands in the same partition's dedup window
    part = await client.place(queue, msg_id)
    subject = client.names.queue_subject(queue, record.task, part)
    try:
        body = await payload(client, record)
    except (TaskqError, LookupError) as exc:
        result.failed.append((record.seq, str(exc)))
        return None
    return record, subject, body, {MSG_ID: msg_id, TASK_HEADER: record.task}
