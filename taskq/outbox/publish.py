"""Publishing committed outbox rows: each row checked again (the table is written by
whoever can write the database, so a row is hostile input), placed as `enqueue` places a
message, and published with its task id as `Nats-Msg-Id`; a row that can never be
published is dead-lettered with its reason instead of retried forever."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from taskq.app import App
from taskq.bulk import publish_many
from taskq.client import Client
from taskq.dlq.record import ErrorInfo, make_record
from taskq.dlq.write import publish_record
from taskq.errors import BrokerError, DecodeError, PayloadTooLarge, TaskqError, TransientError
from taskq.flowcontrol.options import check_priority
from taskq.ids import check_key
from taskq.outbox.claim import Row
from taskq.outbox.rows import TRACE_META
from taskq.policy import DeadReason
from taskq.records.envelope import Envelope, decode
from taskq.topology.names import check_queue

log = logging.getLogger("taskq.outbox")
# what a row may carry as its request's trace context (W3C trace context; rows are hostile)
TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
TRACESTATE = re.compile(r"[\x20-\x7e]{1,512}")


@dataclass
class Relayed:
    """What became of a batch of rows: published, dead-lettered (both to delete), or left
    for later (the server not reachable: the rest of the batch waits with it)."""

    published: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)  # by the enqueue middleware
    left: int = 0

    @property
    def done(self) -> list[int]:
        return self.published + self.dead + self.dropped


class Unpublishable(TaskqError):
    """A row that no retry can publish: `reason` is its dead letter's."""

    def __init__(self, reason: DeadReason, message: str) -> None:
        self.reason = reason
        super().__init__(message)


async def relay(client: Client, app: App, rows: Sequence[Row]) -> Relayed:
    """Publish `rows` in order: all at once (atomic batches where the stream allows), else
    one by one, so that one bad row is dead-lettered and the others go on. The enqueue
    middleware sees each message here, as it is published (one it drops is deleted)."""
    result = Relayed()
    placed: list[tuple[Row, Envelope, str]] = []
    for row in rows:
        try:
            envelope, stream = await _placed(client, app, row)
        except Unpublishable as exc:
            await _dead_letter(client, row, exc)
            result.dead.append(row.id)
            continue
        staged: list[Envelope] = []
        await app.middleware.enqueue(envelope, _stage(staged))
        if staged:
            placed.append((row, staged[0], stream))
        else:
            result.dropped.append(row.id)
    try:
        await publish_many(client, [e for _, e, _ in placed], [s for _, _, s in placed])
        result.published += [row.id for row, _, _ in placed]
    except TaskqError:  # which row: find out one by one
        await _one_by_one(client, placed, result)
    return result


def _stage(staged: list[Envelope]) -> Callable[[Envelope], Awaitable[None]]:
    async def stage(final: Envelope) -> None:
        staged.append(final)

    return stage


async def _one_by_one(
    client: Client, placed: list[tuple[Row, Envelope, str]], result: Relayed
) -> None:
    for i, (row, envelope, _) in enumerate(placed):
        try:
            await client.publish_placed(envelope)
            result.published.append(row.id)
        except (PayloadTooLarge, BrokerError) as exc:
            if isinstance(exc, TransientError):
                result.left = len(placed) - i
                log.warning("outbox: NATS unavailable (%s); %d row(s) wait", exc, result.left)
                return
            await _dead_letter(client, row, Unpublishable("unpublishable", str(exc)))
            result.dead.append(row.id)


async def _placed(client: Client, app: App, row: Row) -> tuple[Envelope, str]:
    """The row's envelope, addressed as `enqueue` would address it, and its stream;
    Unpublishable when the row is not a task this app can publish."""
    if len(row.body) > client.settings.payload_limit:  # not even by claim check
        raise Unpublishable(
            "unpublishable",
            f"a body of {len(row.body)} bytes, over payload_limit "
            f"({client.settings.payload_limit})",
        )
    try:
        envelope = _traced(decode(row.body, subject_task=None, msg_id=None, seq=0))
        check_key(envelope.id, "task id")
    except (DecodeError, TaskqError) as exc:
        raise Unpublishable("undecodable", f"outbox row {row.id}: {exc}"[:500]) from None
    try:
        queue = check_queue(row.queue)
        if row.partition_key is not None:
            check_key(row.partition_key, "partition_key")
    except TaskqError as exc:
        raise Unpublishable("unpublishable", str(exc)[:500]) from None
    task = app.tasks.get(envelope.task)
    if task is None:
        raise Unpublishable("unknown_task", f"no task {envelope.task[:200]!r} in this app")
    try:
        if row.priority is not None:
            check_priority(task.name, row.priority)
        level = task.level(row.priority)
    except TaskqError as exc:
        raise Unpublishable("unpublishable", str(exc)) from None
    # placed by its key, else by its id (never round robin): a row published again meets
    # the first publish in the same stream's dedup window
    part = await client.place_message(queue, envelope.id, row.partition_key)
    placed = client.placed(envelope, queue, part, task.lane, level)
    return placed, client.names.queue_stream(queue, part)


def _traced(envelope: Envelope) -> Envelope:
    """The envelope without the trace context its row carried in its meta, that context (if
    well-formed) as its headers: the enqueue middleware continues the request's trace."""
    carried = envelope.meta.get(TRACE_META)
    if carried is None:
        return envelope
    meta = {k: v for k, v in envelope.meta.items() if k != TRACE_META}
    headers: dict[str, str] = {}
    if isinstance(carried, dict):
        parent, state = carried.get("traceparent"), carried.get("tracestate")
        if isinstance(parent, str) and TRACEPARENT.fullmatch(parent):
            headers["traceparent"] = parent
            if isinstance(state, str) and TRACESTATE.fullmatch(state):
                headers["tracestate"] = state
    return replace(envelope, meta=meta, headers={**envelope.headers, **headers})


async def _dead_letter(client: Client, row: Row, exc: Unpublishable) -> None:
    """The row's dead letter (an oversize body's without its arguments: the DLQ could not
    take it either), stored before its row is deleted."""
    log.error("outbox row %d (task %s): dead-lettered: %s", row.id, row.task_id[:64], exc)
    raw = row.body if len(row.body) <= client.settings.payload_limit else b""
    try:
        envelope: Envelope | None = decode(row.body, subject_task=None, msg_id=None, seq=0)
    except DecodeError:
        envelope = None
    if envelope is not None and not raw:
        envelope = replace(envelope, args=[], kwargs={}, meta={})
    record = make_record(
        envelope=envelope,
        raw=raw,
        reason=exc.reason,
        error=ErrorInfo.of(None, f"outbox: {exc}"),
        attempts=0,
        queue=_queue_or(row.queue),
        original_seq=row.id,
    )
    await publish_record(client, record, None, raw or None)


def _queue_or(queue: str) -> str:
    """The row's queue if it is a valid name (a dead letter's subject names it)."""
    try:
        return check_queue(queue)
    except TaskqError:
        return "default"
