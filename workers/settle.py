"""Settling one judged delivery exactly one way: ack, NAK with a delay, dead-letter then
TERM, or hold (docs/concepts.md). The `Settler` is the one owner of a verdict from its
judgement to its settle: it writes the verdict's records first (`taskq.workers.writes`), so a
task never leaves its queue without its record and a message is never in neither place,
then settles the message, counts it, logs it and tells `after_settle` middleware.

Verdicts that need only their writes and an ack, NAK or TERM are settled together, per turn
of the event loop (the batching settle path): a finished task hands its verdict over and
its handler returns at once; everything handed over within one turn is one group, whose
writes are published pipelined and their acks awaited together; each message is then
settled only once *its own* writes are stored. A lone task settles on the next loop turn:
no timer, no added latency. A verdict whose write failed is written again on its own
(retried while transient), and if that fails too its message is handed back for
redelivery. `ack_sync` tasks, workflow steps, holds, limits and undecodable messages are
settled alone, in their handler.

At most `window` grouped verdicts wait for their writes at once; a task finishing beyond
that keeps its slot until there is room, so the worker fetches no faster than the server
stores. A server that fsyncs every write (`sync_interval: always`) stores a few thousand a
second; unbounded, a drain ran tens of thousands of no-op tasks ahead of their records,
whose acks then missed their 5 s deadline and were written again (bench/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from taskq.client import Client
from taskq.errors import PayloadTooLarge, StorageFull, TransientError
from taskq.middleware import Chain, Settled
from taskq.nats import PubAck
from taskq.policy import Ack, Cancel, Dead, Decision, Failure, Hold, Nak, Outcome, Success
from taskq.records.heartbeats import SETTLED_IN
from taskq.retrying import retry_transient
from taskq.telemetry import settling
from taskq.workers.admission import Admission
from taskq.workers.history import FAILED, RETRIED, SUCCEEDED, Pending
from taskq.workers.job import Job
from taskq.workers.lease import Leases
from taskq.workers.progress import ProgressWriter
from taskq.workers.running import RunningJobs
from taskq.workers.settled_log import log_settled
from taskq.workers.writes import RecordBatches, Writes, send, send_group, store, writes_for

log = logging.getLogger("taskq.worker")
Sent = tuple[Awaitable[PubAck] | None, Awaitable[PubAck] | None]  # a record's, a letter's ack
WINDOW = 512  # grouped verdicts waiting for their writes, at most (see the module's doc)


@dataclass(slots=True)
class Verdict:
    """One delivery's verdict on its way to its settle."""

    job: Job
    decision: Decision
    outcome: Outcome | None
    writes: Writes


class Settler:
    """Writes records and settles messages for one worker; counts what it did in `stats`."""

    def __init__(
        self,
        client: Client,
        stats: Counter[str],
        admission: Admission,
        middleware: Chain,
        progress: ProgressWriter,
        window: int = WINDOW,
        running: RunningJobs | None = None,
        leases: Leases | None = None,
        history: Pending | None = None,
    ) -> None:
        self.client = client
        self._history = history  # run times by (queue, task, verdict): workers/history.py
        self._running = running or RunningJobs()  # notes outcomes the server would not store
        self._leases = leases or Leases()  # held by the judge, released once settled here
        self.settling: set[tuple[str, int]] = set()  # grouped messages (stream, seq) unsettled
        self.stats = stats
        self._admission = admission  # stores held copies (tasks with limits)
        self._middleware = middleware  # told of each final verdict (`after_settle`)
        self._progress = progress  # a task's last progress report is stored before it settles
        self.window = window
        self._turn: list[Verdict] = []  # handed over during this turn of the loop
        self._flushing: set[asyncio.Task[None]] = set()
        self.unsettled = 0  # grouped, not yet settled (or handed back)
        self.peak = 0
        self.groups = 0  # groups settled (bench/breakdown.py reports the mean size)
        self.grouped = 0
        self.batches = RecordBatches()  # a group's records: one atomic batch, or one by one
        self._room = asyncio.Event()
        self._room.set()

    async def settle(self, job: Job, decision: Decision, outcome: Outcome | None) -> None:
        """Settle one verdict: grouped when it needs only its writes and a settle (the group
        settles it after this returns), else alone, before this returns."""
        if job.context is not None and job.envelope is not None and self._progress.started:
            await self._progress.flush(job.envelope.id)
        if isinstance(decision, Hold):
            await self._hold(job, decision)
            return
        verdict = Verdict(
            job, decision, outcome, await writes_for(self.client, job, decision, outcome)
        )
        if _groupable(job, decision):
            await self._join_turn(verdict)
        else:
            await self.settle_alone(verdict)

    async def settle_crashed(self, job: Job, exc: Exception) -> None:
        """Dead-letter a delivery that taskq itself failed on while judging it (`crashed`,
        with the traceback), alone."""
        dead = Dead("crashed", f"taskq failed on this message: {type(exc).__name__}: {exc}"[:500])
        failure = Failure(exc, "".join(traceback.format_exception(exc)))
        await self.settle_alone(
            Verdict(job, dead, failure, await writes_for(self.client, job, dead, failure))
        )

    async def settle_alone(self, verdict: Verdict) -> None:
        """Store the verdict's writes (each acknowledged), then settle its message. A result
        too large to store, even by claim check, fails the task once and for all (another
        attempt would return as much): a `permanent` dead letter naming size and limit."""
        job = verdict.job
        try:
            await store(self.client, job, verdict.decision, verdict.outcome, verdict.writes)
        except PayloadTooLarge as exc:
            if not isinstance(verdict.outcome, Success):
                raise
            dead, failure = _unstorable(job, exc)
            writes = await writes_for(self.client, job, dead, failure)
            verdict = Verdict(job, dead, failure, writes)
            await store(self.client, job, dead, failure, writes)
        await self._finish(verdict)

    async def drain(self) -> None:
        """Settle every grouped verdict so far (the worker's shutdown waits for this)."""
        while self._turn or self._flushing:
            if self._turn:
                self._flush()
            await asyncio.gather(*self._flushing, return_exceptions=True)

    # -- the group of one loop turn --------------------------------------------------------
    async def _join_turn(self, verdict: Verdict) -> None:
        """Take a verdict into this turn's group; waits while the window is full."""
        while self.unsettled >= self.window:
            self._room.clear()
            await self._room.wait()
        self.unsettled += 1
        self.settling.add((verdict.job.delivery.stream, verdict.job.delivery.seq))
        self.peak = max(self.peak, self.unsettled)
        self._turn.append(verdict)
        if len(self._turn) == 1:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        group, self._turn = self._turn, []
        if not group:
            return
        self.groups += 1
        self.grouped += len(group)
        self._spawn(self._settle_group(group))

    async def _settle_group(self, group: list[Verdict]) -> None:
        """Publish every write of the group now, then settle each message once its own
        writes are stored; a verdict whose write failed is written again alone."""
        records = sum(1 for v in group if v.writes.record is not None)
        batched = self.batches.pick(records)
        began = time.monotonic()
        sent = await self._send_group(group, batched)
        stored = [await _stored(v.job, acks) for v, acks in zip(group, sent, strict=True)]
        self.batches.observe(batched, records, time.monotonic() - began)
        done = [v for v, ok in zip(group, stored, strict=True) if ok]
        acked = await _ack_together(self.client, done)
        for verdict, ok in zip(group, stored, strict=True):
            if id(verdict) in acked:
                await self._guarded(self._settled, verdict)
            elif ok:
                await self._guarded(self._finish, verdict)
            else:  # its message waits until its writes are stored (or comes back)
                self._spawn(self._guarded(self.settle_alone, verdict))

    async def _send_group(self, group: list[Verdict], batched: bool) -> list[Sent | None]:
        """The group's writes sent together (its records as atomic batches when `batched`);
        one by one when sending them together failed (not connected): a write sent twice
        is a record put again, its revision the later one."""
        with contextlib.suppress(Exception):
            writes = [(v.job, v.writes) for v in group]
            return list(await send_group(self.client, writes, atomic=batched))
        return [await self._send(verdict) for verdict in group]

    async def _send(self, verdict: Verdict) -> Sent | None:
        try:
            return await send(self.client, verdict.job, verdict.writes)
        except Exception:  # refused before it was sent (e.g. not connected): None
            return None

    async def _guarded(
        self, settle: Callable[[Verdict], Awaitable[None]], verdict: Verdict
    ) -> None:
        """Never let one message's settle failure touch the others: it is redelivered.
        Either way its place in the window is free afterwards."""
        d = verdict.job.delivery
        try:
            await settle(verdict)
        except Exception as exc:
            if isinstance(exc, StorageFull | TransientError):  # the server would not store it
                log.warning(
                    "%s: its outcome not stored (%s); will be redelivered", _tid(verdict.job), exc
                )
                self._running.unstored(d.stream, d.seq, str(exc))
            else:
                log.exception(
                    "unexpected error settling %s; will be redelivered", _tid(verdict.job)
                )
            with contextlib.suppress(Exception):
                await d.nak(delay=self.client.settings.timings.failed_again)
        finally:
            self.unsettled -= 1
            self.settling.discard((d.stream, d.seq))
            self._leases.release(d)
            self._room.set()

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            await work

        task = asyncio.create_task(run())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    # -- settling one message --------------------------------------------------------------
    async def _finish(self, verdict: Verdict) -> None:
        """Settle the message of a verdict whose writes are stored; count it; log it."""
        job, decision = verdict.job, verdict.decision
        d = job.delivery
        with settling(_operation(decision), lambda: _by_queue([verdict])):
            if isinstance(decision, Ack):
                if job.task is not None and job.task.ack_sync:
                    await retry_transient(lambda: d.ack_sync(), deadline=10.0, what="ack")
                else:
                    await d.ack()
            elif isinstance(decision, Nak):
                await self._admission.retry_later(job, decision.delay)
            elif isinstance(decision, Cancel):
                await d.ack()  # recorded as cancelled (or dropped): nothing left to run
            else:
                assert isinstance(decision, Dead)
                await d.term(decision.reason)  # its dead letter is stored
        await self._settled(verdict)

    async def _settled(self, verdict: Verdict) -> None:
        """Count, log and tell `after_settle` of a verdict whose message is settled."""
        job, decision, outcome = verdict.job, verdict.decision, verdict.outcome
        kind = ""
        if isinstance(decision, Ack):
            self.stats["succeeded"] += 1
            kind = SUCCEEDED
        elif isinstance(decision, Nak):
            self.stats["retried"] += 1
            kind = RETRIED
        elif isinstance(decision, Cancel):
            self.stats[decision.state] += 1
        elif isinstance(decision, Dead):
            self.stats["dead"] += 1
            self.stats[f"dead:{decision.reason}"] += 1
            kind = FAILED
        if kind and self._history is not None:  # a registered task's name, never a message's
            task = job.task.name if job.task is not None else ""
            self._history[(job.queue, task, kind)].append(job.ran)
        if not isinstance(decision, Nak):  # its task has its end: `taskq queues`' DONE/s
            self.stats[f"{SETTLED_IN}{job.queue}"] += 1
            self._leases.ended(job.delivery, isinstance(decision, Dead))
        if log.isEnabledFor(logging.INFO if isinstance(decision, Ack) else logging.WARNING):
            log_settled(job, decision, outcome)
        if self._middleware.settles_observed:
            await self._middleware.after_settle(_settled(job, decision, outcome))

    async def _hold(self, job: Job, hold: Hold) -> None:
        """Held by a limit: store the held copy (unless an earlier delivery did), then ack;
        nothing is recorded, no attempt is spent (taskq.flowcontrol.held)."""
        if not hold.done:  # counted as a copy when it re-enters its queue (timers, admission)
            await self._admission.hold(job, hold)
        await job.delivery.ack()
        self._leases.ended(job.delivery, False)
        self.stats["held"] += 1
        await self._admission.after_hold(job)
        log.debug("held %s by %s", _tid(job), hold.limit)


async def _stored(job: Job, sent: Sent | None) -> bool:
    """Whether a verdict's writes are stored (each ack awaited, so no error goes unread).
    A record refused by a full store does not stop the drain: it is lost, visibly; a dead
    letter is never given up on."""
    if sent is None:
        return False
    record, letter = sent
    stored = True
    if record is not None:
        try:
            await record
        except StorageFull as exc:
            log.warning("result of task %s not stored: %s", _tid(job), exc)
        except Exception:
            stored = False
    if letter is not None:
        try:
            await letter
        except Exception:
            stored = False
    return stored


async def _ack_together(client: Client, verdicts: list[Verdict]) -> set[int]:
    """Ack, with one write, the messages of the verdicts whose settle is a plain ack (a
    success, a cancel); which were acked (by `id`). None when the write was refused (not
    connected): each is then settled on its own, as before."""
    acking = [v for v in verdicts if isinstance(v.decision, Ack | Cancel)]
    try:
        with settling("ack", lambda: _by_queue(acking)):
            await client.connection.ack_all([v.job.delivery for v in acking])
    except Exception:
        return set()
    return {id(v) for v in acking}


def _operation(decision: Decision) -> str:
    """The settle's name in telemetry: ack, nak or term."""
    return "nak" if isinstance(decision, Nak) else "term" if isinstance(decision, Dead) else "ack"


def _by_queue(verdicts: list[Verdict]) -> dict[str, list[Mapping[str, str]]]:
    """The settled messages' headers by queue (their trace context, for settle spans)."""
    by_queue: dict[str, list[Mapping[str, str]]] = {}
    for verdict in verdicts:
        envelope = verdict.job.envelope
        by_queue.setdefault(verdict.job.queue, []).append(envelope.headers if envelope else {})
    return by_queue


def _tid(job: Job) -> str:
    return job.envelope.id if job.envelope is not None else f"seq {job.delivery.seq}"


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
    if envelope is None or envelope.workflow is not None or task is None or task.ack_sync:
        return False
    if task.limits is not None:  # limits: a per-key slot is released only once it settled
        return False
    return isinstance(decision, Ack | Nak | Cancel | Dead)
