"""Dead-letter records (DESIGN §4) and how the worker writes them."""

from __future__ import annotations

import base64
import os
import socket
import traceback as tb
from typing import Any

from pydantic import BaseModel, ConfigDict

from taskq.envelope import Envelope, now_iso
from taskq.jetstream import Broker, PubAck
from taskq.names import Names
from taskq.policy import DeadReason
from taskq.retrying import retry_transient

REASONS: tuple[str, ...] = (
    "exhausted",
    "permanent",
    "undecodable",
    "unknown_task",
    "expired",
    "crashed",
)
REASON_HEADER = "Taskq-Reason"
QUEUE_HEADER = "Taskq-Queue"
ID_HEADER = "Taskq-Id"


class ErrorInfo(BaseModel):
    """The error that sent a task to the DLQ."""

    model_config = ConfigDict(frozen=True)

    type: str
    message: str
    traceback: str = ""

    @classmethod
    def of(cls, error: BaseException | None, message: str = "", trace: str = "") -> ErrorInfo:
        if error is None:
            return cls(type="", message=message, traceback=trace)
        text = trace or "".join(tb.format_exception(type(error), error, error.__traceback__))
        return cls(type=type(error).__name__, message=message or str(error), traceback=text)


class DeadLetter(BaseModel):
    """One dead letter as stored in the DLQ stream (the body of its message)."""

    model_config = ConfigDict(extra="ignore")

    v: int = 1
    message: dict[str, Any]
    reason: str
    error: ErrorInfo
    attempts: int
    queue: str
    original_seq: int
    failed_at: str
    worker: str
    # Where the record lives; not part of the body, filled when read back.
    seq: int = 0

    @property
    def id(self) -> str:
        return str(self.message.get("id") or f"seq-{self.original_seq}")

    @property
    def task(self) -> str:
        return str(self.message.get("task") or "_unknown")

    def body(self) -> bytes:
        return self.model_dump_json(exclude={"seq"}).encode()


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def message_of(envelope: Envelope | None, raw: bytes) -> dict[str, Any]:
    """The `message` field: the envelope, or the raw bytes base64-encoded if undecodable."""
    if envelope is not None:
        return envelope.to_dict()
    return {"raw_b64": base64.b64encode(raw).decode()}


def make_record(
    *,
    envelope: Envelope | None,
    raw: bytes,
    reason: DeadReason,
    error: ErrorInfo,
    attempts: int,
    queue: str,
    original_seq: int,
) -> DeadLetter:
    return DeadLetter(
        message=message_of(envelope, raw),
        reason=reason,
        error=error,
        attempts=attempts,
        queue=queue,
        original_seq=original_seq,
        failed_at=now_iso(),
        worker=worker_name(),
    )


async def publish_record(
    broker: Broker,
    names: Names,
    record: DeadLetter,
    task: str | None = None,
    raw: bytes | None = None,
) -> PubAck:
    """Store a record in the DLQ, acknowledged, deduplicated per (task id, original seq).

    The id includes the original stream sequence so the same task dying again after a
    requeue is a new record, not a duplicate swallowed by the dedup window.
    """
    from dlq.oversize import fit  # imports this module: resolved at call time

    record = await fit(broker, names, record, raw)
    task_name = task or record.task
    headers = {
        "Nats-Msg-Id": f"{record.id}.dead.{record.original_seq}",
        REASON_HEADER: record.reason,
        QUEUE_HEADER: record.queue,
        ID_HEADER: record.id,
        "Taskq-Task": task_name,
    }
    subject = names.dlq_subject(record.queue, _subject_safe(task_name))
    body = record.body()
    return await retry_transient(
        lambda: broker.publish(subject, body, headers), what="dead-letter write"
    )


def _subject_safe(task: str) -> str:
    """A task name usable as subject tokens (undecodable messages may have odd subjects)."""
    tokens = [t for t in task.split(".") if t and not set(t) & {"*", ">", " "}]
    return ".".join(tokens) or "_unknown"
