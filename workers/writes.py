"""A verdict's writes, stored before its message settles: the task's result record, its dead
letter, and for a workflow's member what its workflow needs (workers/member_writes.py).

A task never leaves its queue without its record, and a dead letter is stored before the
TERM, so a message is never in neither place. `send` publishes a verdict's record and dead
letter pipelined (a settle group awaits many verdicts' acks together); `store` writes them
one by one, each acknowledged and retried while transient (a verdict settled alone).

The result record a verdict stores is built here too (`result_record`: the call, the
verdict, when and where it ran), and `RecordBatches` chooses whether a settle group's
records go to the server as one atomic batch or one by one, pipelined: whichever has cost
less per record lately, on this server.

A batch is stored with one write and one fsync, which is what a server syncing every write
(`sync_interval: always`, the shipped configs') needs: records cost a fraction of an fsync
each instead of one (a one-process drain of no-op tasks 2,600-2,800/s -> 3,600-4,750/s
here). On a server that syncs every two minutes (its default) the server's staging of each
batch costs more than it saves (6,500-7,300/s pipelined, 4,200-5,600/s batched, groups of
~50). A client cannot ask the server which it is, so the settler measures: each group's
time from sending its records to their last ack, per record, averaged per way, the other
way tried every `EXPLORE`th group so a changed server (or load) is noticed.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from taskq.bulk import BATCH
from taskq.client import Client
from taskq.dlq.record import ErrorInfo, make_record
from taskq.dlq.write import Letter, prepare
from taskq.dlq.write import send as send_letter
from taskq.dlq.write import send_many as send_letters
from taskq.dlq.write import store as store_letter
from taskq.ids import safe_id
from taskq.nats import PubAck
from taskq.policy import Ack, Cancel, Dead, Decision, Failure, Nak, Outcome, Success
from taskq.records.clock import stamp
from taskq.records.heartbeats import worker_name
from taskq.records.results import ResultRecord, encoded, store_encoded
from taskq.workers.job import Job
from taskq.workers.member_writes import member_writes
from taskq.workflows.state import final_id

_WORKER = worker_name()
# A record repeats the call's arguments only when its message is small: a big call would make
# every record as big (or too big to store); its DLQ record keeps the whole original anyway.
CALL_KEPT = 8 * 1024


def result_record(job: Job, decision: Decision, outcome: Outcome | None) -> ResultRecord | None:
    """The record for this verdict, or None when nothing is to be stored.

    A success stores its return value (JSON) unless the task opted out with
    `store_result=False`; failures and cancels are always stored, so waiters learn the end.
    Each record also says which attempt on which worker wrote it, and the call itself:
    the task's story outlives its message.
    """
    fields = record_fields(job, decision, outcome)
    # built by us from trusted values: no validation on the hot path
    return None if fields is None else ResultRecord.model_construct(**fields)


def record_fields(job: Job, decision: Decision, outcome: Outcome | None) -> dict[str, Any] | None:
    """`result_record`'s fields as a plain dict, ready to encode (the settle path's form)."""
    task = job.task
    if isinstance(decision, Ack) and task is not None and not task.store_result:
        # a requeued task's record says `queued` (taskq.dlq.requeue): its end replaces that
        if not _requeued(job):
            return None
        return _call(job) | {"state": "succeeded", "result": None}
    return _call(job) | _verdict(decision, outcome)


def _requeued(job: Job) -> bool:
    envelope = job.envelope
    return envelope is not None and "requeued_from" in envelope.meta


def _verdict(decision: Decision, outcome: Outcome | None) -> dict[str, Any]:
    if isinstance(decision, Ack):
        return {
            "state": "succeeded",
            "result": outcome.value if isinstance(outcome, Success) else None,
        }
    if isinstance(decision, Cancel):
        if decision.state == "dropped":
            return {
                "state": "dropped",
                "reason": decision.reason,
                "result": {"kept": decision.kept},
            }
        return {"state": "cancelled", "reason": "cancelled"}
    error = _error(outcome, decision)
    if isinstance(decision, Nak):
        return {"state": "failed", "error": error}
    assert isinstance(decision, Dead)
    return {"state": "dead", "error": error, "reason": decision.reason}


def _call(job: Job) -> dict[str, Any]:
    envelope = job.envelope
    assert envelope is not None
    ctx = job.context
    kept = len(job.delivery.data) <= CALL_KEPT
    return {
        "task": envelope.task,
        "attempts": job.attempt,
        "queue": job.queue,
        "worker": _WORKER,
        "started_at": stamp(ctx.started) if ctx is not None else None,
        "args": envelope.args if kept else None,
        "kwargs": envelope.kwargs if kept else None,
        "enqueued_at": envelope.enqueued_at,
        "workflow": final_id(envelope.workflow, envelope.id) if envelope.workflow else None,
    }


def _error(outcome: Outcome | None, decision: Decision) -> dict[str, str]:
    if isinstance(outcome, Failure):
        error = outcome.error
        trace = outcome.traceback or "".join(
            traceback.format_exception(type(error), error, error.__traceback__)
        )
        return {"type": type(error).__name__, "message": str(error), "traceback": trace}
    detail = decision.detail if isinstance(decision, Dead) else ""
    return {"type": "", "message": detail, "traceback": ""}


def interrupted_fields(job: Job) -> dict[str, Any]:
    """The record of an attempt a worker stopping past its grace period interrupted (it
    runs again, and this attempt does not count: workers/handback.py)."""
    why = "the worker stopped past its grace period while it ran; it runs again"
    return _call(job) | {
        "state": "interrupted",
        "error": {"type": "Interrupted", "message": why, "traceback": ""},
    }


EXPLORE = 64  # every this many groups, the way that looks worse is tried again
WEIGHT = 0.2  # of a new measurement in the running average


class RecordBatches:
    """The settler's choice of how a group's records are written, from what it measured."""

    def __init__(self) -> None:
        self.cost: dict[bool, float | None] = {True: None, False: None}  # s per record
        self.groups = 0

    def pick(self, records: int) -> bool:
        """True: write this group's `records` as one batch."""
        if records < 2:
            return False
        self.groups += 1
        batched, alone = self.cost[True], self.cost[False]
        if batched is None or alone is None:
            return batched is None  # each way measured once first
        better = batched <= alone
        return (not better) if self.groups % EXPLORE == 0 else better

    def observe(self, batched: bool, records: int, seconds: float) -> None:
        """A group of `records` written `batched` (or not) took `seconds` to be stored."""
        if records < 2:
            return
        cost = seconds / records
        old = self.cost[batched]
        self.cost[batched] = cost if old is None else (1 - WEIGHT) * old + WEIGHT * cost


@dataclass(slots=True)
class Writes:
    """What one verdict stores before its message settles (None: nothing of that kind)."""

    record: bytes | None  # the result record, encoded
    letter: Letter | None  # a dead verdict's dead letter


async def writes_for(
    client: Client, job: Job, decision: Decision, outcome: Outcome | None
) -> Writes:
    """The record and dead letter of this verdict (an undecodable message has no record:
    there is no task id anyone could wait on)."""
    fields = record_fields(job, decision, outcome) if job.envelope is not None else None
    record = None if fields is None else encoded(fields)
    letter = await _letter(client, job, decision, outcome) if isinstance(decision, Dead) else None
    return Writes(record, letter)


async def send(
    client: Client, job: Job, writes: Writes
) -> tuple[Awaitable[PubAck] | None, Awaitable[PubAck] | None]:
    """Publish the verdict's writes now; the storage acks of its record and of its dead
    letter, to await (pipelined; None: no such write)."""
    record = letter = None
    if writes.record is not None:
        assert job.envelope is not None
        key = safe_id(job.envelope.id)
        record = await client.connection.kv.put_nowait(client.results.of(key), key, writes.record)
    if writes.letter is not None:
        letter = await send_letter(client, writes.letter)
    return record, letter


async def send_group(
    client: Client, verdicts: list[tuple[Job, Writes]], *, atomic: bool
) -> list[tuple[Awaitable[PubAck] | None, Awaitable[PubAck] | None]]:
    """Publish a settle group's writes now: its result records, per results bucket, and
    its dead letters, as atomic batches when `atomic` and the stream takes them (one write
    to disk for its share of the group), else pipelined in one socket write. Per verdict,
    the acks of its record and its letter (a refused batch fails each of its writes, which
    its verdict then writes again alone)."""
    by_bucket: dict[str, list[tuple[int, str, bytes]]] = {}
    only = client.results.only
    for i, (job, writes) in enumerate(verdicts):
        if job.envelope is not None and writes.record is not None:
            key = safe_id(job.envelope.id)
            bucket = only or client.results.of(key)
            by_bucket.setdefault(bucket, []).append((i, key, writes.record))
    records: dict[int, Awaitable[PubAck]] = {}
    for bucket, keyed in by_bucket.items():
        if atomic:
            records.update(await _batches(client, bucket, keyed))
        left = [(i, key, record) for i, key, record in keyed if i not in records]
        if left:
            acks = await client.connection.kv.put_many_nowait(bucket, [(k, r) for _, k, r in left])
            records.update(zip([i for i, _, _ in left], acks, strict=True))
    dead = [(i, w.letter) for i, (_, w) in enumerate(verdicts) if w.letter is not None]
    sent = await send_letters(client, [letter for _, letter in dead], atomic=atomic) if dead else []
    letters = {i: ack for (i, _), ack in zip(dead, sent, strict=True)}
    return [(records.get(i), letters.get(i)) for i in range(len(verdicts))]


async def _batches(
    client: Client, bucket: str, keyed: list[tuple[int, str, bytes]]
) -> dict[int, Awaitable[PubAck]]:
    """One bucket's records sent as atomic batches (a lone record is not): the ack of each
    record's batch, by verdict, for the batches the bucket took."""
    batched: dict[int, Awaitable[PubAck]] = {}
    if len(keyed) < 2:
        return batched
    for start in range(0, len(keyed), BATCH):
        chunk = keyed[start : start + BATCH]
        ack = await client.connection.kv.put_batch(bucket, [(k, r) for _, k, r in chunk])
        if ack is not None:
            batched.update((i, ack) for i, _, _ in chunk)
    return batched


async def store(
    client: Client,
    job: Job,
    decision: Decision,
    outcome: Outcome | None,
    writes: Writes,
) -> None:
    """Write the verdict's record, its workflow's next step or end, and its dead letter, each
    acknowledged (a record refused by a full store is skipped with a warning)."""
    envelope = job.envelope
    if envelope is not None and writes.record is not None:
        await store_encoded(client, envelope.id, writes.record)
    if envelope is not None and envelope.workflow is not None:  # workers/member_writes.py
        ended = isinstance(decision, Dead | Cancel)
        record = result_record(job, decision, outcome) if ended else None
        await member_writes(client, envelope, decision, outcome, record)
    if writes.letter is not None:
        await store_letter(client, writes.letter)


async def _letter(client: Client, job: Job, dead: Dead, outcome: Outcome | None) -> Letter:
    d = job.delivery
    error = outcome.error if isinstance(outcome, Failure) else None
    trace = outcome.traceback if isinstance(outcome, Failure) else ""
    message = dead.detail if dead.detail and error is None else ""
    record = make_record(
        envelope=job.envelope,
        raw=d.data,
        reason=dead.reason,
        error=ErrorInfo.of(
            error, message=message or (str(error) if error else dead.detail), trace=trace
        ),
        attempts=job.attempt,
        queue=job.queue,
        original_seq=d.seq,
        site=client.site,
    )
    return await prepare(client, record, _task_name(client, job), d.data)


def _task_name(client: Client, job: Job) -> str:
    if job.envelope is not None:
        return job.envelope.task
    parsed = client.names.parse_queue_subject(job.delivery.subject)
    return parsed[1] if parsed else "_unknown"
