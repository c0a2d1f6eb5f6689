"""A verdict's writes, stored before its message settles: the task's result record, its dead
letter, and for a workflow step the workflow's next step (or its end).

A task never leaves its queue without its record, and a dead letter is stored before the
TERM, so a message is never in neither place. `send` publishes a verdict's record and dead
letter pipelined (a settle group awaits many verdicts' acks together); `store` writes them
one by one, each acknowledged and retried while transient (a verdict settled alone).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from taskq.bulk import BATCH
from taskq.client import Client
from taskq.dlq.record import ErrorInfo, make_record
from taskq.dlq.write import Letter, prepare
from taskq.dlq.write import send as send_letter
from taskq.dlq.write import send_many as send_letters
from taskq.dlq.write import store as store_letter
from taskq.ids import safe_id
from taskq.nats import PubAck
from taskq.policy import Ack, Cancel, Dead, Decision, Failure, Outcome, Success
from taskq.records.results import encoded, store_encoded
from taskq.records.results import store as store_result
from taskq.workers.job import Job
from taskq.workers.outcomes import final_record, record_fields, result_record
from taskq.workflows.canvas import advance
from taskq.workflows.canvas_runs import note_settled
from taskq.workflows.state import RunStepState, final_id
from taskq.workflows.steps import step_ended


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
    for i, (job, writes) in enumerate(verdicts):
        if job.envelope is not None and writes.record is not None:
            key = safe_id(job.envelope.id)
            by_bucket.setdefault(client.results.of(key), []).append((i, key, writes.record))
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
    if envelope is not None and envelope.workflow is not None:
        final = final_id(envelope.workflow, envelope.id)
        if isinstance(decision, Ack) and isinstance(outcome, Success):
            await advance(client, envelope, outcome.value)  # before the ack
        elif isinstance(decision, Dead | Cancel) and final:
            # the workflow ends visibly: its final task reports this member's error/cancel
            record = result_record(job, decision, outcome)
            if record is not None:
                await store_result(client, final, final_record(envelope, record))
    if envelope is not None and isinstance(envelope.workflow, RunStepState):
        # into its run's journal (the step's lease kept while a full store refuses it)
        await step_ended(client, envelope, decision, outcome)
    elif envelope is not None and envelope.workflow is not None:
        await note_settled(client, envelope, decision)  # a chain's, group's or chord's summary
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
