"""The task message on the wire (docs/wire-format.md, version 1) and its codec.

A foreign producer only has to send `{"args": [...], "kwargs": {...}}` on
`<prefix>.q.<queue>.<task>`: the id defaults to the `Nats-Msg-Id` header (or the stream
sequence) and the task name to the subject's task tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from pydantic_core import from_json

from taskq.errors import ArgumentsError, DecodeError, NonFiniteFloat
from taskq.records.clock import parse_time
from taskq.records.finite import finite_json
from taskq.workflows.state import (
    WORKFLOW_STATE,
    ChainState,
    ChordState,
    WorkflowState,
    state_to_wire,
)

VERSION = 1
MSG_ID = "Nats-Msg-Id"
TASK_HEADER = "Taskq-Task"


@dataclass(frozen=True)
class Envelope:
    """One task invocation: what to run, with which arguments, and its bookkeeping.

    Not part of the JSON body: `headers`, extra NATS headers that travel with the message
    (e.g. `traceparent`; enqueue middleware may add to them), and where it goes or came from
    (`queue`, `subject`).
    """

    id: str
    task: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    enqueued_at: str | None = None
    expires_at: str | None = None
    eta: str | None = None
    workflow: WorkflowState | None = None  # on the wire: "flow"
    meta: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    queue: str = field(default="", compare=False, repr=False)
    subject: str = field(default="", compare=False, repr=False)

    def addressed(self, queue: str, subject: str) -> Envelope:
        """This envelope bound for `queue` on `subject`: `dataclasses.replace` without its
        cost (an `__init__` with every field again, per task on the enqueue path)."""
        moved = object.__new__(Envelope)
        moved.__dict__.update(self.__dict__, queue=queue, subject=subject)
        return moved

    def to_dict(self) -> dict[str, Any]:
        flow = None if self.workflow is None else state_to_wire(self.workflow)
        return self._fields(flow)

    def _fields(self, flow: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "v": VERSION,
            "id": self.id,
            "task": self.task,
            "args": self.args,
            "kwargs": self.kwargs,
            "enqueued_at": self.enqueued_at,
            "expires_at": self.expires_at,
            "eta": self.eta,
            "flow": flow,
            "meta": self.meta,
        }

    def encode(self) -> bytes:
        """The message body: compact UTF-8 JSON (pydantic-core's serializer, several times
        faster than json's), or ArgumentsError naming a nan/inf/-inf in it and its task."""
        # the flow dumped as Python (the same bytes as `state_to_wire`'s once encoded): its
        # JSON mode would write a nan in a chain step's arguments as null, unseen
        flow = None if self.workflow is None else self.workflow.model_dump(exclude_none=True)
        try:
            return finite_json(self._fields(flow))
        except NonFiniteFloat as exc:
            task, found = self._located(exc)
            raise ArgumentsError(task, str(found)) from found

    def _located(self, found: NonFiniteFloat) -> tuple[str, NonFiniteFloat]:
        """Whose value the non-finite float `found` in the body is, and where in that value
        it is (`args[0]` of a chain's next step rather than `value['flow']['rest']...`)."""
        for task, what, value in self._user_values():
            try:
                finite_json(value, what=what)
            except NonFiniteFloat as exc:
                return task, exc
        return self.task, found

    def _user_values(self) -> list[tuple[str, str, Any]]:
        """(task, name, value) of every value in the envelope a user gave: its arguments and
        meta, and its workflow's steps still to be published (their arguments)."""
        values = [(self.task, "args", self.args), (self.task, "kwargs", self.kwargs)]
        values.append((self.task, "meta", self.meta))
        flow = self.workflow
        steps = flow.rest if isinstance(flow, ChainState) else ()
        if isinstance(flow, ChordState):
            steps = (flow.callback,)
        for step in steps:
            values += [(step.task, "args", step.args), (step.task, "kwargs", step.kwargs)]
        return values

    def with_meta(self, **values: Any) -> Envelope:
        """A copy with `values` added to `meta` (for enqueue middleware)."""
        return replace(self, meta={**self.meta, **values})

    def expired(self, now: datetime | None = None) -> bool:
        if not self.expires_at:
            return False
        return parse_time(self.expires_at) <= (now or datetime.now(UTC))


# field -> accepted JSON types; only `args`/`kwargs` are required from foreign producers.
# Checked by hand rather than by a pydantic model: this runs once per delivered message.
_OPTIONAL_TEXT = ("id", "task", "enqueued_at", "expires_at", "eta")
_TIMES = ("enqueued_at", "expires_at", "eta")


def decode(
    data: bytes,
    *,
    subject_task: str | None,
    msg_id: str | None,
    seq: int,
    headers: dict[str, str] | None = None,
    queue: str = "",
    subject: str = "",
) -> Envelope:
    """Parse wire bytes into an Envelope, or raise DecodeError saying what is wrong.
    `headers`, `queue` and `subject` are where it came from (kept, not validated)."""
    raw = _json_object(data)
    _check_version(raw)
    args, kwargs = raw.get("args", []), raw.get("kwargs", {})
    if not isinstance(args, list):
        raise _field_error("args", "an array", args)
    if not isinstance(kwargs, dict):
        raise _field_error("kwargs", "an object", kwargs)
    _check_optional(raw)
    task = raw.get("task") or subject_task
    if not task:
        raise DecodeError("no task name in the body or the subject")
    return Envelope(
        id=raw.get("id") or msg_id or str(seq),
        task=task,
        args=args,
        kwargs=kwargs,
        enqueued_at=raw.get("enqueued_at"),
        expires_at=raw.get("expires_at"),
        eta=raw.get("eta"),
        workflow=_workflow(raw.get("flow")),
        meta=raw.get("meta") or {},
        headers=headers or {},
        queue=queue,
        subject=subject,
    )


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        # a third of json.loads's time; its errors said below
        raw = from_json(data, allow_inf_nan=False)
    except ValueError as exc:
        # Refused even when json.loads would take it: json.loads is laxer than the parser
        # whose serializer writes the task back (its result, its dead letter). What only
        # json.loads takes (a lone surrogate escape, nesting past 201 levels) cannot be
        # written back: such a body was accepted, then every settle failed writing its
        # record and the message came back until max_deliver (and broke the sweeper).
        # NaN and Infinity are not JSON: they would reach the task, then be refused in
        # its record, a held copy, a chain's next step (taskq.records.finite).
        raise _refusal(data, exc) from None
    if not isinstance(raw, dict):
        raise DecodeError(f"body is JSON {type(raw).__name__}, not an object")
    return raw


def _refusal(data: bytes, error: ValueError) -> DecodeError:
    """The DecodeError for a body pydantic-core refused, saying why (json's errors read
    better than its own)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return DecodeError(f"body is not UTF-8: {exc.reason} at byte {exc.start}")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return DecodeError(f"body is not JSON: {str(exc)[:200]}")
    if not _utf8_encodable(raw):
        return DecodeError(
            "body has a string with a lone surrogate escape (\\ud800-\\udfff unpaired): "
            "not text, it has no UTF-8 encoding"
        )
    found = _non_finite(raw)
    if found is not None:
        return DecodeError(str(found))
    return DecodeError(f"body is JSON taskq cannot carry: {str(error)[:200]}")


def _non_finite(raw: Any) -> NonFiniteFloat | None:
    """Where the first nan/inf/-inf in a parsed body is (None: none, or too deep to tell)."""
    try:
        finite_json(raw, what="body")
    except NonFiniteFloat as exc:
        return exc
    except ValueError:  # too deep for pydantic-core to write: its own reason is given
        return None
    return None


def _utf8_encodable(raw: Any) -> bool:
    """False when a string in `raw` (a key or a value, at any depth) has no UTF-8 encoding."""
    try:
        json.dumps(raw, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    except RecursionError:
        return True  # too deep to look through: pydantic-core's own reason is given
    return True


def _check_version(raw: dict[str, Any]) -> None:
    version = raw.get("v", VERSION)
    if type(version) is not int:
        raise _field_error("v", "an integer", version)
    if version != VERSION:
        raise DecodeError(f"unsupported wire format version {version} (this taskq reads {VERSION})")


def _check_optional(raw: dict[str, Any]) -> None:
    for name in _OPTIONAL_TEXT:
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            raise _field_error(name, "a string", value)
    for name in ("flow", "meta"):
        value = raw.get(name)
        if value is not None and not isinstance(value, dict):
            raise _field_error(name, "an object", value)
    for name in _TIMES:
        value = raw.get(name)
        if value is None:
            continue
        try:
            parse_time(value)
        except ValueError:
            raise DecodeError(f"{name}: not an RFC 3339 time: {value[:64]!r}") from None


def _workflow(value: dict[str, Any] | None) -> WorkflowState | None:
    if value is None:
        return None
    try:
        return WORKFLOW_STATE.validate_python(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise DecodeError(f"flow: {where + ': ' if where else ''}{first.get('msg')}") from None


def _field_error(name: str, expected: str, value: Any) -> DecodeError:
    return DecodeError(f"{name}: expected {expected}, got {type(value).__name__}")
