"""Requeue: send dead letters back to a queue, then remove them from the DLQ.

Each record is republished under a deterministic `Nats-Msg-Id` (`<id>.requeue.<dlq seq>`), and
deleted from the DLQ only after the server acknowledged the publish. Re-running an
interrupted requeue therefore never enqueues a task twice (within the queue's dedup window)
and never loses one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dlq.oversize import original_bytes
from dlq.record import DeadLetter
from taskq.app import App
from taskq.envelope import MSG_ID, TASK_HEADER, now_iso
from taskq.errors import TaskqError
from taskq.jetstream import PubAck
from taskq.names import check_queue

CHUNK = 256


@dataclass
class RequeueResult:
    requeued: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)  # (dlq seq, why)


def requeue_id(record: DeadLetter) -> str:
    return f"{record.id}.requeue.{record.seq}"


async def payload(app: App, record: DeadLetter) -> bytes:
    """The bytes to publish: the envelope marked `requeued_from`, or the original bytes."""
    message = dict(record.message)
    if "task" in message and "blob" not in message and "raw_b64" not in message:
        meta = dict(message.get("meta") or {})
        meta["requeued_from"] = {"dlq_seq": record.seq, "reason": record.reason, "at": now_iso()}
        message["meta"] = meta
        from pydantic_core import to_json

        return to_json(message)
    return await original_bytes(app, record)


async def requeue(
    app: App,
    records: Iterable[DeadLetter],
    to_queue: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> RequeueResult:
    """Republish `records` (to their queue, or `to_queue`) and delete them from the DLQ."""
    result = RequeueResult()
    pending = list(records)
    for start in range(0, len(pending), CHUNK):
        chunk = pending[start : start + CHUNK]
        await _requeue_chunk(app, chunk, to_queue, result)
        if progress:
            progress(len(chunk))
    return result


async def _requeue_chunk(
    app: App, chunk: list[DeadLetter], to_queue: str | None, result: RequeueResult
) -> None:
    broker = await app.broker()
    waits: list[tuple[DeadLetter, Any]] = []
    for record in chunk:
        queue = check_queue(to_queue or record.queue)
        msg_id = requeue_id(record)
        # placed by its id: a requeue run again lands in the same partition's dedup window
        part = await app.place(queue, msg_id)
        subject = app.names.queue_subject(queue, record.task, part)
        headers = {MSG_ID: msg_id, TASK_HEADER: record.task}
        try:
            body = await payload(app, record)
            waits.append((record, await broker.publish_nowait(subject, body, headers)))
        except (TaskqError, LookupError) as exc:
            result.failed.append((record.seq, str(exc)))
    acks = await asyncio.gather(*(w for _, w in waits), return_exceptions=True)
    published = [r for (r, _), a in zip(waits, acks, strict=True) if isinstance(a, PubAck)]
    for (record, _), ack in zip(waits, acks, strict=True):
        if not isinstance(ack, PubAck):
            result.failed.append((record.seq, f"publish not acknowledged: {ack}"))
    # only now, with every publish acknowledged, remove the records
    await asyncio.gather(*(broker.delete_msg(app.names.dlq_stream, r.seq) for r in published))
    for record in published:
        if "blob" in record.message:
            await broker.delete_blob(app.names.blobs_bucket, str(record.message["blob"]))
    result.requeued += len(published)
