"""Writing a dead-letter record into the DLQ stream (the worker and the sweeper do)."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.client import Client
from taskq.dlq.oversize import fit
from taskq.dlq.record import ID_HEADER, QUEUE_HEADER, REASON_HEADER, DeadLetter
from taskq.nats import PubAck
from taskq.retrying import retry_transient


@dataclass(frozen=True)
class Letter:
    """A dead letter ready to publish: where, its bytes, its headers."""

    subject: str
    body: bytes
    headers: dict[str, str]


async def prepare(
    client: Client, record: DeadLetter, task: str | None = None, raw: bytes | None = None
) -> Letter:
    """`record` as the message to store (its original claim-checked if it is too big).

    The message id includes the original stream sequence so the same task dying again after
    a requeue is a new record, not a duplicate swallowed by the dedup window.
    """
    record = await fit(client, record, raw)
    task_name = task or record.task
    headers = {
        "Nats-Msg-Id": f"{record.id}.dead.{record.original_seq}",
        REASON_HEADER: record.reason,
        QUEUE_HEADER: record.queue,
        ID_HEADER: record.id,
        "Taskq-Task": task_name,
    }
    subject = client.names.dlq_subject(record.queue, _subject_safe(task_name))
    return Letter(subject, record.body(), headers)


async def publish_record(
    client: Client,
    record: DeadLetter,
    task: str | None = None,
    raw: bytes | None = None,
) -> PubAck:
    """Store a record in the DLQ, acknowledged, deduplicated per (task id, original seq)."""
    letter = await prepare(client, record, task, raw)
    return await retry_transient(
        lambda: client.connection.publish(letter.subject, letter.body, letter.headers),
        what="dead-letter write",
    )


def _subject_safe(task: str) -> str:
    """A task name usable as subject tokens (undecodable messages may have odd subjects)."""
    tokens = [t for t in task.split(".") if t and not set(t) & {"*", ">", " "}]
    return ".".join(tokens) or "_unknown"
