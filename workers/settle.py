"""Settling one judged delivery exactly one way: ack, NAK with a delay, or dead-letter then
TERM (docs/concepts.md). The task's result record (and workflow step) is written first, so a task
never leaves its queue without its record; the dead letter is written before the TERM, so a
message is never in neither place."""

from __future__ import annotations

import logging
import time
from collections import Counter

from taskq.client import Client
from taskq.dlq.record import ErrorInfo, make_record
from taskq.dlq.write import Letter, prepare
from taskq.errors import PayloadTooLarge
from taskq.flow import final_id
from taskq.middleware import Chain, Settled
from taskq.policy import Ack, Cancel, Dead, Decision, Failure, Hold, Nak, Outcome, Success
from taskq.results import encoded
from taskq.results import store as store_result
from taskq.retrying import retry_transient
from taskq.workers.admission import Admission
from taskq.workers.job import Job
from taskq.workers.logs import BUFFERED, SETTLED, write_direct
from taskq.workers.outcomes import final_record, record_fields, result_record
from taskq.workers.settle_group import Handed, SettleGroup
from taskq.workflows import advance

log = logging.getLogger("taskq.worker")


class Settler:
    """Writes records and settles messages for one worker; counts what it did in `stats`."""

    def __init__(
        self,
        client: Client,
        stats: Counter[str],
        admission: Admission | None = None,
        middleware: Chain | None = None,
    ) -> None:
        self.client = client
        self.stats = stats
        self.admission = admission
        self.middleware = middleware  # told of each final verdict (`after_settle`)
        self.group = SettleGroup(client, self._finish, self.settle_alone)

    async def settle(self, job: Job, decision: Decision, outcome: Outcome | None) -> None:
        """Settle one verdict: alone when it needs more than its writes and a settle (holds,
        workflow steps, limits, `ack_sync`, undecodable), else handed to the group (which
        settles it after this returns)."""
        if isinstance(decision, Hold):
            await self._hold(job, decision)
        elif _groupable(job, decision):
            record = self._encoded(job, decision, outcome)
            letter = (
                await self._letter(job, decision, outcome) if isinstance(decision, Dead) else None
            )
            await self.group.add(Handed(job, decision, outcome, record, letter))
        else:
            await self.settle_alone(job, decision, outcome)

    async def settle_alone(self, job: Job, decision: Decision, outcome: Outcome | None) -> None:
        """Write the verdict's records (acknowledged), then settle its message. A result
        too large to store, even by claim check, fails the task once and for all (another
        attempt would return as much): a `permanent` dead letter naming size and limit."""
        try:
            await self._record(job, decision, outcome)
        except PayloadTooLarge as exc:
            if not isinstance(outcome, Success):
                raise
            decision, outcome = _unstorable(job, exc)
            await self._record(job, decision, outcome)
        await self._finish(job, decision, outcome)

    async def drain(self) -> None:
        """Settle every verdict handed to the group so far (before the worker closes)."""
        await self.group.drain()

    async def _finish(self, job: Job, decision: Decision, outcome: Outcome | None) -> None:
        """Settle the message of a verdict whose records are stored; count it; log it."""
        d = job.delivery
        if isinstance(decision, Ack):
            if job.task is not None and job.task.ack_sync:
                await retry_transient(lambda: d.ack_sync(), deadline=10.0, what="ack")
            else:
                await d.ack()
            self.stats["succeeded"] += 1
        elif isinstance(decision, Nak):
            await d.nak(decision.delay)
            self.stats["retried"] += 1
        elif isinstance(decision, Cancel):
            await d.ack()  # recorded as cancelled (or dropped): nothing left to run
            self.stats[decision.state] += 1
        else:
            assert isinstance(decision, Dead)
            await self._dead_letter(job, decision, outcome)
            self.stats["dead"] += 1
            self.stats[f"dead:{decision.reason}"] += 1
        _log(job, decision, outcome)
        if self.middleware is not None and self.middleware.settles_observed:
            await self.middleware.after_settle(_settled(job, decision, outcome))

    def _encoded(self, job: Job, decision: Decision, outcome: Outcome | None) -> bytes | None:
        fields = record_fields(job, decision, outcome)
        return None if fields is None else encoded(fields)

    async def _hold(self, job: Job, hold: Hold) -> None:
        """Held by a limit: store the held copy (unless an earlier delivery did), then ack;
        nothing is recorded, no attempt is spent (taskq.flowcontrol.held)."""
        assert self.admission is not None
        if not hold.done:
            await self.admission.hold(job, hold)
        await job.delivery.ack()
        self.stats["held"] += 1
        await self.admission.after_hold(job)
        log.debug(
            "held %s[%s] by %s",
            job.envelope.task if job.envelope else "?",
            job.envelope.id if job.envelope else "?",
            hold.limit,
        )

    async def _record(self, job: Job, decision: Decision, outcome: Outcome | None) -> None:
        envelope = job.envelope
        if envelope is None:
            return  # undecodable: no task id anyone could wait on
        record = result_record(job, decision, outcome)
        if record is not None:
            await store_result(self.client, envelope.id, record)
        if envelope.flow is None:
            return
        final = final_id(envelope.flow, envelope.id)
        if isinstance(decision, Ack) and isinstance(outcome, Success):
            await advance(self.client, envelope, outcome.value)  # before the ack
        elif isinstance(decision, Dead | Cancel) and record is not None and final:
            # the workflow ends visibly: its final task reports this member's error/cancel
            await store_result(self.client, final, final_record(envelope, record))

    async def _dead_letter(self, job: Job, dead: Dead, outcome: Outcome | None) -> None:
        """Store the dead letter (unless the settle group did), then TERM: a message is
        never in neither place."""
        if not job.lettered:
            letter = await self._letter(job, dead, outcome)
            await retry_transient(
                lambda: self.client.connection.publish(letter.subject, letter.body, letter.headers),
                what="dead-letter write",
            )
        await job.delivery.term(dead.reason)

    async def _letter(self, job: Job, dead: Dead, outcome: Outcome | None) -> Letter:
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
        )
        task_name = job.envelope.task if job.envelope else self._subject_task(d.subject)
        return await prepare(self.client, record, task_name, d.data)

    def _subject_task(self, subject: str) -> str:
        parsed = self.client.names.parse_queue_subject(subject)
        return parsed[1] if parsed else "_unknown"


def _settled(job: Job, decision: Decision, outcome: Outcome | None) -> Settled:
    envelope, task = job.envelope, job.task
    return Settled(
        task_id=envelope.id if envelope is not None else "",
        task=task.name if task is not None else "",
        queue=job.queue,
        attempt=job.attempt,
        verdict=decision,
        outcome=outcome,
        context=job.context,
        middleware_options=task.middleware_options if task is not None else {},
    )


def _unstorable(job: Job, exc: PayloadTooLarge) -> tuple[Dead, Failure]:
    name = job.envelope.task if job.envelope is not None else "?"
    what = f"the result of {name}"
    return Dead("permanent"), Failure(PayloadTooLarge(exc.size, exc.limit, what))


def _groupable(job: Job, decision: Decision) -> bool:
    """A verdict settled by its writes (a record, a dead letter) and then an ack, NAK or
    TERM (decoded, no workflow step, no limits, not `ack_sync`): the group may settle it."""
    envelope, task = job.envelope, job.task
    if envelope is None or envelope.flow is not None or task is None or task.ack_sync:
        return False
    if task.flow is not None:  # limits: a per-key slot is released only once it settled
        return False
    return isinstance(decision, Ack | Nak | Cancel | Dead)


def _log(job: Job, decision: Decision, outcome: Outcome | None) -> None:
    """One line per settled task (successes at INFO, buffered; the rest at once)."""
    if not log.isEnabledFor(logging.INFO if isinstance(decision, Ack) else logging.WARNING):
        return
    name = job.envelope.task if job.envelope else "?"
    tid = job.envelope.id if job.envelope else f"seq {job.delivery.seq}"
    took = time.monotonic() - job.started if job.started else 0.0
    attempts = job.task.policy.attempts if job.task else 0
    head = f"{name}[{tid}] attempt {job.attempt}/{attempts or '?'}"
    # the line's fields for `--log-format json` (workers/logs.py SETTLED_KEYS order)
    task = (name, tid, job.attempt, job.queue, took)
    if isinstance(decision, Ack):
        if not write_direct(log, f"succeeded {head} in {took:.3f}s"):
            done = {BUFFERED: True, SETTLED: (*task, "succeeded", "")}
            log.info("succeeded %s in %.3fs", head, took, extra=done)
    elif isinstance(decision, Cancel):
        ran = f" after {took:.3f}s" if took else " before it ran"
        log.warning("cancelled %s%s", head, ran, extra={SETTLED: (*task, "cancelled", "")})
    elif isinstance(decision, Nak):
        error = outcome.error if isinstance(outcome, Failure) else None
        retry = {SETTLED: (*task, "retried", "")}
        log.warning("retry %s in %.1fs: %r", head, decision.delay, error, extra=retry)
    elif isinstance(decision, Dead):
        dead = {SETTLED: (*task, "dead", decision.reason)}
        why = _why(decision, outcome)
        log.error("dead-lettered %s (%s): %s", head, decision.reason, why, extra=dead)


def _why(decision: Dead, outcome: Outcome | None) -> str:
    if isinstance(outcome, Failure):
        return f"{type(outcome.error).__name__}: {outcome.error}"
    return decision.detail
