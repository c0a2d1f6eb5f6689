"""Judging one delivery: decode it, find its task, check it may run, run it, decide.

The verdict comes from `taskq.policy.decide` alone; deliveries that cannot run (undecodable,
unknown task, crash-looped, expired, bad arguments) are judged dead without running.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from taskq.app import App
from taskq.context import TaskContext
from taskq.envelope import MSG_ID, Envelope, decode
from taskq.errors import ArgumentsError, DecodeError, UnknownTaskError
from taskq.nats import Delivery
from taskq.policy import Dead, Decision, Failure, Outcome, decide
from taskq.task import Task
from taskq.workers.execute import call_function, run_attempt, unwrap
from taskq.workers.lease import Leases
from taskq.workers.setup import QueueSetup
from taskq.workers.spark_jobs import LendSlot, SparkExecutor


@dataclass
class Job:
    """What the worker knows about one delivery while handling it."""

    setup: QueueSetup
    delivery: Delivery
    envelope: Envelope | None = None
    task: Task[Any, Any] | None = None
    started: float = 0.0

    @property
    def queue(self) -> str:
        return self.setup.queue


class Judge:
    """Turns a delivery into a verdict, running the task when it may run."""

    def __init__(
        self, app: App, threads: Executor, leases: Leases, spark: SparkExecutor, lend: LendSlot
    ) -> None:
        self.app = app
        self._threads = threads
        self._leases = leases
        self._spark = spark
        self._lend = lend

    async def judge(self, job: Job) -> tuple[Decision, Outcome | None]:
        """Decode, look up, check, run: the verdict for this delivery."""
        d = job.delivery
        try:
            job.envelope = self._decode(d, job.queue)
        except DecodeError as exc:
            return Dead("undecodable", exc.reason), Failure(exc)
        task = self.app.tasks.get(job.envelope.task)
        if task is None:
            return Dead("unknown_task"), Failure(UnknownTaskError(job.envelope.task))
        job.task = task
        if d.num_delivered > task.policy.attempts:
            return _crashed(task, d.num_delivered), None
        if job.envelope.expired():
            return Dead("expired", f"expired at {job.envelope.expires_at}"), None
        try:
            args, kwargs = task.validator.for_call(job.envelope.args, job.envelope.kwargs)
        except ArgumentsError as exc:
            return Dead("permanent", str(exc)), Failure(exc)
        outcome = await self._run(job, task, args, kwargs)
        return decide(task.policy, d.num_delivered, outcome), outcome

    async def _run(
        self, job: Job, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Outcome:
        assert job.envelope is not None
        job.started = time.monotonic()
        d = job.delivery
        ctx = TaskContext(
            job.envelope, job.queue, d.num_delivered, task.policy, task.timeout, time.time()
        )
        with self._leases.hold(d, job.setup.ack_wait):
            return await run_attempt(ctx, self.app.middleware, self._call(task, args, kwargs, ctx))

    def _call(
        self, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], ctx: TaskContext
    ) -> Callable[[], Awaitable[Any]]:
        if task.executor != "spark":
            return lambda: call_function(task, args, kwargs, self._threads)

        async def on_spark() -> Any:
            return unwrap(await self._spark.run(task, args, kwargs, ctx.id, self._lend))

        return on_spark

    def _decode(self, d: Delivery, queue: str) -> Envelope:
        parsed = self.app.names.parse_queue_subject(d.subject)
        return decode(
            d.data,
            subject_task=parsed[1] if parsed else None,
            msg_id=d.header(MSG_ID),
            seq=d.seq,
            headers=d.raw_headers,  # read-only use: no copy per delivery
            queue=queue,
            subject=d.subject,
        )


def _crashed(task: Task[Any, Any], delivered: int) -> Dead:
    return Dead(
        "crashed",
        f"delivered {delivered} times, more than its {task.policy.attempts} attempt(s): "
        "a worker died while running it",
    )
