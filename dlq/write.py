"""Writing a dead-letter record into the DLQ stream (the worker and the sweeper do), through
one publish (`send`), or many at once (`send_many`, a settle group's)."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from taskq.bulk import BATCH
from taskq.client import Client
from taskq.dlq.oversize import fit
from taskq.dlq.record import ID_HEADER, QUEUE_HEADER, REASON_HEADER, DeadLetter
from taskq.errors import ConfigError
from taskq.ids import safe_id
from taskq.nats import PubAck
from taskq.retrying import retry_transient
from taskq.topology.names import MAX_TASK_NAME, check_task


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
        "Nats-Msg-Id": dead_letter_id(record.id, record.original_seq),
        REASON_HEADER: record.reason,
        QUEUE_HEADER: record.queue,
        ID_HEADER: safe_id(record.id),
        "Taskq-Task": _subject_safe(task_name),
    }
    subject = client.names.dlq_subject(record.queue, _subject_safe(task_name))
    return Letter(subject, record.body(), headers)


async def send(client: Client, letter: Letter) -> Awaitable[PubAck]:
    """The one publish of a dead letter: sent now, its storage ack to await (many letters
    and records of one settle group are pipelined, their acks awaited together)."""
    return await client.connection.publish_nowait(letter.subject, letter.body, letter.headers)


async def send_many(
    client: Client, letters: list[Letter], *, atomic: bool
) -> list[Awaitable[PubAck]]:
    """Publish `letters` now, per letter its storage ack to await: one atomic batch (one
    write to disk) when `atomic` and the DLQ stream takes it, else pipelined in one socket
    write."""
    messages = [(letter.subject, letter.body, letter.headers) for letter in letters]
    connection = client.connection
    if atomic and 1 < len(messages) <= BATCH:
        ack = await connection.publish_atomic(client.names.dlq_stream, messages)
        if ack is not None:
            return [ack] * len(messages)
    return list(await connection.publish_many_nowait(list(messages)))


async def store(client: Client, letter: Letter) -> PubAck:
    """A dead letter stored, acknowledged, retried while transient (deduplicated per task id
    and original sequence, so a retry never stores it twice)."""

    async def once() -> PubAck:
        return await (await send(client, letter))

    return await retry_transient(once, what="dead-letter write")


async def publish_record(
    client: Client,
    record: DeadLetter,
    task: str | None = None,
    raw: bytes | None = None,
) -> PubAck:
    """Store a record in the DLQ, acknowledged, deduplicated per (task id, original seq)."""
    return await store(client, await prepare(client, record, task, raw))


def _subject_safe(task: str) -> str:
    """A task name usable as subject tokens and a header value: the name itself when it is
    a valid task name (undecodable messages may carry anything there), else `_invalid`."""
    try:
        return check_task(task) if len(task) <= MAX_TASK_NAME else "_invalid"
    except ConfigError:
        return "_invalid" if task else "_unknown"


def dead_letter_id(task_id: str, original_seq: int) -> str:
    """A dead letter's message id: the task's safe id, `.dead.`, the original sequence (so
    the same task dying again after a requeue is a new record)."""
    return f"{safe_id(task_id)}.dead.{original_seq}"
