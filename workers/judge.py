"""Judging one delivery: decode it, find its task, check it may run, run it, decide.

The verdict comes from `taskq.policy.decide` alone; deliveries that cannot run (undecodable,
unknown task, crash-looped, expired, bad arguments) are judged dead without running, and
cancelled ones are judged cancelled without running. What features add (a debounced
burst's wake-up, a throttle's drop, a workflow step's journal, an edge site's rerun, an
`eta`) are stages the worker wired in (workers/stages.py); limits go through the admission.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from taskq.app import App
from taskq.context import Reporter, TaskContext
from taskq.errors import ArgumentsError, DecodeError, TaskCancelled, UnknownTaskError
from taskq.flowcontrol.held import SPENT, UNKNOWN, spent
from taskq.flowcontrol.start_gate import StartGate, StartSlipped
from taskq.ids import safe_id
from taskq.nats import Delivery
from taskq.policy import Cancel, Dead, Decision, Failure, Hold, Outcome, decide
from taskq.records.envelope import MSG_ID, Envelope, decode
from taskq.records.sealing import PLAINTEXT_REFUSED
from taskq.task import Task
from taskq.telemetry import CONSUMED_MESSAGES
from taskq.workers.admission import Admission
from taskq.workers.cancel_watch import CancelWatch
from taskq.workers.execute import call_function, refusing_non_finite, run_attempt, unwrap
from taskq.workers.executors import Runners
from taskq.workers.job import Job
from taskq.workers.lease import Leases
from taskq.workers.running import RunningJobs
from taskq.workers.stages import Early, Phase, Stages, first_verdict

log = logging.getLogger("taskq.worker")
SUBJECTS_KEPT = 4096  # task subjects a judge keeps parsed


class Judge:
    """Turns a delivery into a verdict, running the task when it may run (its job listed in
    `running` meanwhile, for cancels and heartbeats)."""

    def __init__(
        self,
        app: App,
        runners: Runners,
        leases: Leases,
        running: RunningJobs,
        cancels: CancelWatch,
        reporter: Reporter,
        admission: Admission,
        stages: Stages,
    ) -> None:
        self.app = app
        self._stages = stages  # the features' checks this worker needs (workers/stages.py)
        self._runners = runners
        self._leases = leases
        self._running = running
        self._cancels = cancels
        self._reporter = reporter
        self._admission = admission  # flow control (tasks with limits only)
        # read once: the worker runs with one prefix and one (mutable) middleware chain
        self._names, self._middleware = app.names, app.middleware
        # (queue, task) by subject: a worker sees few subjects, parsed once each; bounded,
        # as a producer may publish to any number of subjects its queue's filter takes
        self._subjects: dict[str, tuple[str, str] | None] = {}
        settings = app.settings
        self._sealing_required = bool(settings.encryption_key) and not settings.allow_plaintext

    async def judge(self, job: Job) -> tuple[Decision, Outcome | None]:
        """Decode, look up, check, run: the verdict for this delivery. Its lease is held
        from here until it is settled (the caller releases it): a wait in the worker (an eta
        due soon, a rate limit's reserved start, a debounced burst) or a slow store restarts
        the server's ack timer as running does."""
        self._leases.hold(job.delivery, job.setup.ack_wait, job.queue)
        CONSUMED_MESSAGES.add(job.queue)
        return await self._judged(job)

    async def _judged(self, job: Job) -> tuple[Decision, Outcome | None]:
        early = await self._before_running(job)
        if early is not None:
            return early
        task, envelope = job.task, job.envelope
        assert task is not None and envelope is not None
        try:
            args, kwargs = task.validator.for_call(envelope.args, envelope.kwargs)
        except ArgumentsError as exc:
            return Dead("permanent", str(exc)), Failure(exc)
        if task.limits is not None:
            hold = await self._admission.admit(job, task, args, kwargs)
            if hold is not None:
                return hold, None
        try:
            outcome = await self._run(job, task, args, kwargs)
        except StartSlipped as exc:  # its rate-limited start slipped: held, not run late
            return await self._admission.slipped(job, task, exc), None
        return decide(task.policy, job.attempt, outcome), outcome

    async def _before_running(self, job: Job) -> Early | None:
        """The verdict on a delivery that must not run now (undecodable, cancelled, unknown,
        crash-looped, expired, or stopped by a stage), else None with `job.envelope` and
        `job.task` set."""
        try:
            job.envelope = self._decode(job.delivery, job.queue)
            arrival = self._stages.on_arrival
            early = await first_verdict(arrival.stages, job) if _marked(arrival, job) else None
        except DecodeError as exc:
            return Dead("undecodable", exc.reason), Failure(exc)
        if early is not None:
            return early
        job.task = self.app.tasks.get(job.envelope.task)
        before = self._stages.before_run
        early = self._refused(job)
        if early is None and _marked(before, job):
            early = await first_verdict(before.stages, job)
        if early is not None:
            return early
        return self._refused(job, cancelled_only=True)  # a cancel while a stage waited

    def _refused(self, job: Job, cancelled_only: bool = False) -> Early | None:
        """Cancelled, unknown, crash-looped or expired: its verdict; else None."""
        envelope, task, d = job.envelope, job.task, job.delivery
        assert envelope is not None
        if self._cancels.keys and self._cancels.requested(envelope.id):  # none: no call
            return Cancel(), Failure(TaskCancelled(envelope.id))
        if cancelled_only:
            return None
        if task is None:
            return self._unknown(job)
        if d.header(SPENT) is not None:  # a held task's copy carries the attempts it used
            job.attempt = d.num_delivered + spent(d)
        if job.attempt > task.policy.attempts:
            unstored = self._running.why_unstored(d.stream, d.seq)
            return _crashed(task, job.attempt, unstored), None
        if envelope.expires_at and envelope.expired(self.app.clock.now()):
            return Dead("expired", f"expired at {envelope.expires_at}"), None
        return None

    def _unknown(self, job: Job) -> tuple[Decision, Outcome | None]:
        """A task this worker's app does not declare: held (no attempt spent) and back in
        its queue in `timings.unknown_again` seconds, for a worker that knows it (a rolling deploy's
        newer one, another app's on a shared queue), until `unknown_task_grace` seconds
        after a worker first could not run it; then its dead letter."""
        envelope, d = job.envelope, job.delivery
        assert envelope is not None
        now = self.app.clock.time()
        since, grace = _since(d.header(UNKNOWN), now), self.app.settings.unknown_task_grace
        if not since and grace > 0:  # first seen: said once, not at every return
            log.info(
                "no worker knows task %r here: %s held for one that does (%g s at most)",
                envelope.task[:200],
                envelope.id[:200],
                grace,
            )
        since = since or now
        if now - since < grace:
            # jittered: copies due at one whole second reach whichever worker's pull waits
            # then, and one worker's pulls can be in step with them (one copy went to the
            # worker that cannot run it ten times in a row in a test before this)
            again = now + self.app.settings.timings.unknown_again * (1 + random.random())
            held = f"no worker knows task {envelope.task!r} yet"
            return Hold(held, until=again, since=since), None
        why = f"no worker of queue {job.queue} knew it for {grace:g} s"
        return Dead("unknown_task", why), Failure(UnknownTaskError(envelope.task, why))

    async def _run(
        self, job: Job, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Outcome:
        assert job.envelope is not None
        job.started = time.monotonic()
        ctx = job.context = TaskContext(
            job.envelope,
            job.queue,
            job.attempt,
            task.policy,
            task.timeout,
            self.app.clock.time(),
            task.middleware_options,
            self.app.clock,
        )
        ctx.reporter = self._reporter
        key = safe_id(job.envelope.id)
        self._running.jobs[key] = job
        job.running = job.handler or asyncio.current_task()  # what a cancel interrupts
        try:
            outcome = await run_attempt(
                ctx, self._middleware, self._call(task, args, kwargs, ctx, job.gate)
            )
        except asyncio.CancelledError:
            if not job.cancel_requested:
                raise  # shutdown past grace: the worker hands the message back
            if job.running is not None:
                job.running.uncancel()
            outcome = Failure(TaskCancelled(job.envelope.id))
        finally:
            job.ran = time.monotonic() - job.started
            job.running = None
            self._running.jobs.pop(key, None)
        if job.cancel_requested:  # code that could not be interrupted ended on its own
            return Failure(TaskCancelled(job.envelope.id))
        return outcome

    def _call(
        self,
        task: Task[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ctx: TaskContext,
        gate: StartGate | None,
    ) -> Callable[[], Awaitable[Any]]:
        """The attempt; its value checked for what JSON cannot carry when it goes anywhere
        (its record, its workflow's next step)."""
        call = self._runner(task, args, kwargs, ctx, gate)
        if task.store_result or ctx.envelope.workflow is not None:
            return refusing_non_finite(call)
        return call

    def _runner(
        self,
        task: Task[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ctx: TaskContext,
        gate: StartGate | None,
    ) -> Callable[[], Awaitable[Any]]:
        pool = self._runners.pool
        if task.executor not in ("process", "spark") or (
            task.executor == "process" and pool is None
        ):
            return lambda: call_function(task, args, kwargs, self._runners.threads, gate)

        async def elsewhere() -> Any:  # in a process, or as a Spark job: gated before it goes
            if gate is not None:
                await gate.passed()
            if task.executor == "process" and pool is not None:
                return await pool.run(task, args, kwargs, ctx)
            spark = self._runners.spark
            assert spark is not None  # wired for every Spark task of the worker's queues
            return unwrap(await spark.run(task, args, kwargs, ctx.id, self._runners.lend))

        return elsewhere

    def _decode(self, d: Delivery, queue: str) -> Envelope:
        if d.unreadable is not None:  # sealed with a key this worker does not have
            raise DecodeError(d.unreadable)
        if not d.sealed and self._sealing_required:
            raise DecodeError(PLAINTEXT_REFUSED)
        parsed = self._task_of(d.subject)
        envelope = decode(
            d.data,
            subject_task=parsed[1] if parsed else None,
            msg_id=d.header(MSG_ID),
            seq=d.seq,
            headers=d.raw_headers,  # read-only use: no copy per delivery
            queue=queue,
            subject=d.subject,
        )
        # the subject decides which task runs: per-task publish permissions then mean it
        if parsed is None or envelope.task != parsed[1]:
            shown = parsed[1] if parsed else d.subject
            raise DecodeError(f"the body names task {envelope.task[:80]!r}, its subject {shown!r}")
        return envelope

    def _task_of(self, subject: str) -> tuple[str, str] | None:
        """The (queue, task) a task subject names, None if it names none."""
        try:
            return self._subjects[subject]
        except KeyError:
            if len(self._subjects) >= SUBJECTS_KEPT:
                self._subjects.clear()
            parsed = self._subjects[subject] = self._names.parse_queue_subject(subject)
            return parsed


def _marked(phase: Phase, job: Job) -> bool:
    """Whether the delivery carries a header or an envelope field that marks one of
    `phase`'s stages (a plain task carries none: no stage is asked)."""
    headers = job.delivery.raw_headers
    if headers and not phase.headers.isdisjoint(headers):
        return True
    for field in phase.fields:  # noqa: SIM110 (a loop: no generator made per delivery)
        if getattr(job.envelope, field):
            return True
    return False


def _since(header: str | None, now: float) -> float:
    """When a worker first could not run it (0: this is the first), from its copy's header."""
    try:
        value = float(header or 0)
    except ValueError:
        return 0.0
    return value if 0 < value <= now else 0.0  # a raw publish may say anything


def _crashed(task: Task[Any, Any], delivered: int, unstored: str | None = None) -> Dead:
    """Its attempts ran out without an outcome: its outcome could not be stored (the cause,
    when this worker saw it), else a worker died while running it."""
    beyond = f"delivered {delivered} times, more than its {task.policy.attempts} attempt(s)"
    if unstored is not None:
        return Dead("unstored", f"{beyond}: its outcome could not be stored: {unstored}")
    return Dead("crashed", f"{beyond}: a worker died while running it")
