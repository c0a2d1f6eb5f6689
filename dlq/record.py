"""Dead-letter records (docs/wire-format.md) and how the worker writes them.

A record's `message` is the task as it arrived, in one of three typed shapes validated when a
record is read: the decoded envelope (`EnvelopeOriginal`), the undecodable bytes in base64
(`RawOriginal`), or a reference to the bytes kept in the object store (`BlobOriginal`, see
`taskq.dlq.oversize`). Each serializes to the same JSON object as before it was typed.

A fourth shape is never written: `SealedOriginal` stands in for a record this process cannot
open (sealed with a key it lacks), so that readers list it as sealed instead of dropping it.
"""

from __future__ import annotations

import base64
import traceback as tb
from typing import Annotated, Any, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    model_serializer,
)

from taskq.policy import DeadReason
from taskq.records.clock import now_iso
from taskq.records.envelope import Envelope
from taskq.records.heartbeats import worker_name
from taskq.records.places import ID_HEADER as ID_HEADER  # part of a dead letter's sealing context

REASONS: tuple[str, ...] = get_args(DeadReason)  # one list: the policy's
REASON_HEADER = "Taskq-Reason"
QUEUE_HEADER = "Taskq-Queue"
# Every model here is built when a dead letter is first written or read (`defer_build`), not
# when a worker imports this module: a worker whose tasks all succeed never needs them.


class ErrorInfo(BaseModel):
    """The error that sent a task to the DLQ."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    type: str
    message: str
    traceback: str = ""

    @classmethod
    def of(cls, error: BaseException | None, message: str = "", trace: str = "") -> ErrorInfo:
        """The record of `error` (or of `message` alone when there is no exception)."""
        if error is None:
            return cls(type="", message=message, traceback=trace)
        text = trace or "".join(tb.format_exception(type(error), error, error.__traceback__))
        return cls(type=type(error).__name__, message=message or str(error), traceback=text)


class EnvelopeOriginal(BaseModel):
    """A decoded original: the task envelope's wire dict, every key kept (unknown ones too).

    Serializes only the keys it was given, in the envelope's order, so a record written from
    `Envelope.to_dict()` (or read back from the stream) keeps its exact JSON shape.
    """

    model_config = ConfigDict(frozen=True, extra="allow", defer_build=True)

    v: int = 1
    id: str
    task: str
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    enqueued_at: str | None = None
    expires_at: str | None = None
    eta: str | None = None
    flow: dict[str, Any] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave out defaults for keys the original did not have: no new null keys."""
        data: dict[str, Any] = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        return {key: value for key, value in data.items() if key in given}

    def requeued(self, dlq_seq: int, reason: str, at: str) -> EnvelopeOriginal:
        """A copy marked in `meta.requeued_from` (a requeue says where the task came from)."""
        origin = {"dlq_seq": dlq_seq, "reason": reason, "at": at}
        return self.model_copy(update={"meta": {**self.meta, "requeued_from": origin}})


class RawOriginal(BaseModel):
    """An undecodable original: its bytes, base64-encoded."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    raw_b64: str

    def decoded(self) -> bytes:
        """The original bytes."""
        return base64.b64decode(self.raw_b64)


class BlobOriginal(BaseModel):
    """An original too large for the record: its bytes live in the `<PREFIX>_BLOBS` object
    store under `blob` (`size` bytes); `id` and `task` keep the record browsable."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    blob: str
    size: int
    id: str | None = None
    task: str | None = None


class SealedOriginal(BaseModel):
    """A dead letter this process cannot open, in a reader's hands: its body is sealed with
    a key the process lacks (or was not sealed for this place). `sealed` says why it does
    not open, naming the key; `id` and `task` are what the letter's headers say. Never
    written: nothing can be requeued or exported from it (`taskq.dlq.browse.parse`)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    sealed: str
    id: str | None = None
    task: str | None = None


def _original_kind(value: Any) -> str | None:
    """The tag of an original, from a wire dict (by its keys) or from a model."""
    if isinstance(value, dict):
        if "sealed" in value:
            return "sealed"
        return "blob" if "blob" in value else "raw" if "raw_b64" in value else "envelope"
    if isinstance(value, SealedOriginal):
        return "sealed"
    if isinstance(value, BlobOriginal):
        return "blob"
    if isinstance(value, RawOriginal):
        return "raw"
    return "envelope" if isinstance(value, EnvelopeOriginal) else None


Original = Annotated[
    Annotated[EnvelopeOriginal, Tag("envelope")]
    | Annotated[RawOriginal, Tag("raw")]
    | Annotated[BlobOriginal, Tag("blob")]
    | Annotated[SealedOriginal, Tag("sealed")],
    Discriminator(_original_kind),
]


class DeadLetter(BaseModel):
    """One dead letter as stored in the DLQ stream (the body of its message)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    v: int = 1
    message: Original
    reason: str
    error: ErrorInfo
    attempts: int
    queue: str
    original_seq: int
    failed_at: str
    worker: str
    site: str | None = None  # the edge site it died at (docs/edge.md); None: not at a site
    # Where the record lives; not part of the body, filled when read back.
    seq: int = 0

    @property
    def id(self) -> str:
        """The task id (`seq-<original seq>` when the original has none)."""
        known = None if isinstance(self.message, RawOriginal) else self.message.id
        return known or f"seq-{self.original_seq}"

    @property
    def task(self) -> str:
        """The task name (`_unknown` when the original has none)."""
        known = None if isinstance(self.message, RawOriginal) else self.message.task
        return known or "_unknown"

    def to_dict(self) -> dict[str, Any]:
        """Its JSON view (`taskq dlq ls --json`, the dashboard's `/api/dlq`): a stable schema
        for scripts, without the traceback or the original's body."""
        return {
            "id": self.id,
            "seq": self.seq,
            "task": self.task,
            "queue": self.queue,
            "reason": self.reason,
            "attempts": self.attempts,
            "error": {"type": self.error.type, "message": self.error.message},
            "failed_at": self.failed_at,
            "worker": self.worker,
            "site": self.site,
            "original_seq": self.original_seq,
        }

    def body(self) -> bytes:
        """The record as the DLQ message body."""
        return self.model_dump_json(exclude={"seq"}).encode()


def message_of(envelope: Envelope | None, raw: bytes) -> EnvelopeOriginal | RawOriginal:
    """The `message` field: the envelope, or the raw bytes base64-encoded if undecodable."""
    if envelope is not None:
        return EnvelopeOriginal.model_validate(envelope.to_dict())
    return RawOriginal(raw_b64=base64.b64encode(raw).decode())


def make_record(
    *,
    envelope: Envelope | None,
    raw: bytes,
    reason: DeadReason,
    error: ErrorInfo,
    attempts: int,
    queue: str,
    original_seq: int,
    site: str | None = None,
) -> DeadLetter:
    """A new record of a task that died now, in this worker (at edge site `site`)."""
    return DeadLetter(
        message=message_of(envelope, raw),
        reason=reason,
        error=error,
        attempts=attempts,
        queue=queue,
        original_seq=original_seq,
        failed_at=now_iso(),
        worker=worker_name(),
        site=site,
    )
