"""The Worker: pulls tasks from shared durable consumers, runs them, and settles each one.

Per queue, a fetch loop reserves free slots first and fetches at most that many messages,
so a worker never holds work it cannot start (no prefetch starvation). Every message is
settled exactly one way: ack, NAK with a delay, or dead-letter then TERM (DESIGN §5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dlq.record import ErrorInfo, make_record, publish_record
from dlq.sweeper import run_sweeper
from taskq.app import App
from taskq.envelope import MSG_ID, Envelope, decode
from taskq.errors import (
    ArgumentsError,
    BrokerError,
    DecodeError,
    NotFound,
    TaskqError,
    TransientError,
    UnknownTaskError,
)
from taskq.jetstream import Broker, Delivery, Puller
from taskq.policy import Ack, Dead, Decision, Failure, Nak, Outcome, Success, decide
from taskq.results import store as store_result
from taskq.retrying import retry_transient
from taskq.task import Task
from taskq.telemetry import processing, settled
from taskq.workflows import advance, final_id
from workers.execute import run_attempt
from workers.lease import Leases
from workers.logs import MAY_WAIT
from workers.outcomes import result_record
from workers.setup import QueueSetup, prepare
from workers.slots import Slots
from workers.spark_jobs import SparkExecutor
from workers.spark_session import SparkRuntime

log = logging.getLogger("taskq.worker")


@dataclass
class _Job:
    """What the worker knows about one delivery while handling it."""

    setup: QueueSetup
    delivery: Delivery
    envelope: Envelope | None = None
    task: Task[Any, Any] | None = None
    started: float = 0.0

    @property
    def queue(self) -> str:
        return self.setup.queue


class Worker:
    """Consumes `queues` of `app` with up to `concurrency` tasks running at once."""

    def __init__(
        self,
        app: App,
        queues: list[str] | None = None,
        *,
        concurrency: int = 16,
        grace: float = 30.0,
        fetch_timeout: float = 1.0,
        max_batch: int = 256,
        sweeper: bool = True,
        spark: SparkRuntime | None = None,
    ) -> None:
        self.app = app
        self.queues = list(queues or app.queues() or ["default"])
        self.concurrency = concurrency
        self.grace = grace
        self.fetch_timeout = fetch_timeout
        self.max_batch = max_batch
        self.sweeper = sweeper
        self.stats: Counter[str] = Counter()
        self._slots = Slots(concurrency)
        self._stopping = asyncio.Event()
        self._ready = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix="taskq-task")
        self._setups: dict[str, QueueSetup] = {}
        self._leases = Leases()
        self._broker: Broker | None = None
        # Spark tasks (if any) run here; `spark` shares a session across workers (tests)
        mine = [t for t in app.tasks.values() if t.queue in self.queues]
        self._spark = SparkExecutor(app, mine, spark)

    # -- lifecycle -------------------------------------------------------------------------
    def stop(self) -> None:
        """Begin a graceful shutdown: stop fetching, let running tasks finish within grace."""
        if not self._stopping.is_set():
            log.info("worker stopping: %d task(s) running", len(self._running))
        self._stopping.set()
        self._slots.wake()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until streams and consumers are set up and fetching has begun."""
        await asyncio.wait_for(self._ready.wait(), timeout)

    async def run(self) -> None:
        """Run until `stop()`; returns after running tasks are settled (or NAKed at grace)."""
        broker = await self.app.broker()
        self._broker = broker
        self._setups = await retry_transient(
            lambda: prepare(self.app, broker, self.queues), what="worker set-up"
        )
        log.info(
            "worker ready: queues %s, concurrency %d, prefix %s",
            _described(self.queues, list(self._setups.values())),
            self.concurrency,
            self.app.settings.prefix,
        )
        if len(self._setups) > self.concurrency:
            log.warning(
                "%d streams to consume but concurrency %d: an idle stream holds a slot while "
                "it waits, so some wait their turn; raise -c",
                len(self._setups), self.concurrency,
            )
        loops = [asyncio.create_task(self._consume(stream)) for stream in self._setups]
        if self.sweeper:
            # Every worker sweeps crash-looped messages on one shared durable consumer.
            loops.append(asyncio.create_task(run_sweeper(self.app, broker, self._stopping)))
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            self._stopping.set()
            self._slots.wake()
            await asyncio.gather(*loops, return_exceptions=True)
            await self._finish_running()
            await self._spark.close()
            await self._leases.close()
            with contextlib.suppress(TaskqError):
                await broker.flush()
            self._threads.shutdown(wait=False, cancel_futures=True)
            log.info("worker stopped: %s", dict(self.stats))

    async def _finish_running(self) -> None:
        if not self._running:
            return
        _, pending = await asyncio.wait(set(self._running), timeout=self.grace)
        for job in pending:  # past grace: cancelled jobs NAK themselves for redelivery
            job.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)

    # -- fetching --------------------------------------------------------------------------
    async def _consume(self, stream: str) -> None:
        puller: Puller | None = None
        want = 1
        while not self.stopping:
            setup = self._setups[stream]
            taken = await self._slots.reserve(want)
            if self.stopping:
                self._slots.release(taken)
                break
            asked = taken
            try:
                if puller is None:
                    puller = await self._broker_or_fail().pull(setup.stream, setup.durable)
                # each delivery starts the moment it arrives, on a slot reserved for it
                async for delivery in puller.stream(taken, self.fetch_timeout):
                    taken -= 1
                    self._start(setup, delivery)
            except (TransientError, BrokerError) as exc:
                puller = await self._recover(setup, puller, exc)
            finally:
                self._slots.release(taken)
            # Ask for twice what came last time: a lingering request holds its slots until
            # it fills or expires, and another queue or partition may need them meanwhile;
            # a backlog still reaches full batches in a few round trips.
            want = min(self.max_batch, max(1, 2 * (asked - taken)))
        if puller is not None:
            await puller.close()

    async def _recover(
        self, setup: QueueSetup, puller: Puller | None, exc: TaskqError
    ) -> Puller | None:
        """After a failed fetch: back off, and re-create the consumer if it vanished."""
        log.warning("fetch from %s failed: %s", _where(setup), exc)
        if isinstance(exc, NotFound) or not isinstance(exc, TransientError):
            with contextlib.suppress(TaskqError):
                fresh = await prepare(self.app, self._broker_or_fail(), [setup.queue])
                self._setups.update((s, fresh[s]) for s in self._setups.keys() & fresh.keys())
            if puller is not None:
                await puller.close()
            puller = None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=0.5)
        return puller

    def _start(self, setup: QueueSetup, delivery: Delivery) -> None:
        if self.stopping:
            # Fetched while stopping: hand it straight back for another worker.
            job = asyncio.create_task(self._give_back(delivery))
        else:
            job = asyncio.create_task(self._handle(_Job(setup, delivery)))
        self._running.add(job)
        job.add_done_callback(self._done)

    def _done(self, job: asyncio.Task[None]) -> None:
        self._running.discard(job)
        self._slots.release(1)

    async def _give_back(self, delivery: Delivery) -> None:
        with contextlib.suppress(TaskqError):
            await delivery.nak()

    def _broker_or_fail(self) -> Broker:
        if self._broker is None:
            raise RuntimeError("worker is not running")
        return self._broker

    # -- handling one delivery --------------------------------------------------------------
    async def _handle(self, job: _Job) -> None:
        try:
            decision, outcome = await self._judge(job)
            await self._settle(job, decision, outcome)
        except asyncio.CancelledError:
            # Shutdown past grace: let another worker run it as soon as possible.
            with contextlib.suppress(Exception):
                await asyncio.shield(job.delivery.nak())
            self.stats["interrupted"] += 1
        except Exception:
            # Never crash the worker: leave the message for redelivery after a pause.
            log.exception("unexpected error handling seq %s; will be redelivered", job.delivery.seq)
            with contextlib.suppress(Exception):
                await job.delivery.nak(delay=5.0)

    async def _judge(self, job: _Job) -> tuple[Decision, Outcome | None]:
        """Decode, look up, check, run: the verdict for this delivery."""
        d = job.delivery
        try:
            job.envelope = self._decode(job)
        except DecodeError as exc:
            return Dead("undecodable", exc.reason), Failure(exc)
        task = self.app.tasks.get(job.envelope.task)
        if task is None:
            return Dead("unknown_task"), Failure(UnknownTaskError(job.envelope.task))
        job.task = task
        if d.num_delivered > task.policy.attempts:
            return self._crashed(task, d.num_delivered), None
        if job.envelope.expired():
            return Dead("expired", f"expired at {job.envelope.expires_at}"), None
        try:
            args, kwargs = task.validator.for_call(job.envelope.args, job.envelope.kwargs)
        except ArgumentsError as exc:
            return Dead("permanent", str(exc)), Failure(exc)
        job.started = time.monotonic()
        setup = job.setup
        with (
            self._leases.hold(d, setup.ack_wait),
            processing(d.subject, job.queue, job.envelope, d.raw_headers, d.num_delivered,
                       setup.durable) as span,
        ):
            if task.executor == "spark":
                tid = job.envelope.id
                outcome = await self._spark.run(task, args, kwargs, tid, self._slots.lent)
            else:
                outcome = await run_attempt(task, args, kwargs, self._threads)
            decision = decide(task.policy, d.num_delivered, outcome)
            error = outcome.error if isinstance(outcome, Failure) else None
            settled(span, _verdict(decision), job.queue, task.name,
                    time.monotonic() - job.started, error)
        return decision, outcome

    def _decode(self, job: _Job) -> Envelope:
        d = job.delivery
        parsed = self.app.names.parse_queue_subject(d.subject)
        return decode(
            d.data,
            subject_task=parsed[1] if parsed else None,
            msg_id=d.header(MSG_ID),
            seq=d.seq,
        )

    @staticmethod
    def _crashed(task: Task[Any, Any], delivered: int) -> Dead:
        return Dead(
            "crashed",
            f"delivered {delivered} times, more than its {task.policy.attempts} attempt(s): "
            "a worker died while running it",
        )

    # -- settling ---------------------------------------------------------------------------
    async def _settle(self, job: _Job, decision: Decision, outcome: Outcome | None) -> None:
        d = job.delivery
        # the result/state record is written before the message is settled (DESIGN §7)
        await self._record(job, decision, outcome)
        if isinstance(decision, Ack):
            if job.task is not None and job.task.ack_sync:
                await retry_transient(lambda: d.ack_sync(), deadline=10.0, what="ack")
            else:
                await d.ack()
            self.stats["succeeded"] += 1
        elif isinstance(decision, Nak):
            await d.nak(decision.delay)
            self.stats["retried"] += 1
        else:
            await self._dead_letter(job, decision, outcome)
            self.stats["dead"] += 1
            self.stats[f"dead:{decision.reason}"] += 1
        self._log(job, decision, outcome)

    async def _record(self, job: _Job, decision: Decision, outcome: Outcome | None) -> None:
        envelope = job.envelope
        if envelope is None:
            return  # undecodable: no task id anyone could wait on
        broker = self._broker_or_fail()
        record = result_record(job.task, envelope.task, decision, outcome,
                               job.delivery.num_delivered)
        if record is not None:
            await store_result(self.app, broker, envelope.id, record)
        if envelope.flow is None:
            return
        if isinstance(decision, Ack) and isinstance(outcome, Success):
            await advance(self.app, broker, envelope, outcome.value)  # before the ack
        elif isinstance(decision, Dead) and record is not None and final_id(envelope):
            # the workflow fails visibly: its final task reports this member's error
            await store_result(self.app, broker, str(final_id(envelope)), record)

    async def _dead_letter(self, job: _Job, dead: Dead, outcome: Outcome | None) -> None:
        """DLQ record first (acknowledged), then TERM: the message is never in neither place."""
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
            attempts=d.num_delivered,
            queue=job.queue,
            original_seq=d.seq,
        )
        task_name = job.envelope.task if job.envelope else self._subject_task(d)
        await publish_record(self._broker_or_fail(), self.app.names, record, task_name, d.data)
        await d.term(dead.reason)

    def _subject_task(self, d: Delivery) -> str:
        parsed = self.app.names.parse_queue_subject(d.subject)
        return parsed[1] if parsed else "_unknown"

    def _log(self, job: _Job, decision: Decision, outcome: Outcome | None) -> None:
        if not log.isEnabledFor(logging.INFO if isinstance(decision, Ack) else logging.WARNING):
            return
        name = job.envelope.task if job.envelope else "?"
        tid = job.envelope.id if job.envelope else f"seq {job.delivery.seq}"
        took = time.monotonic() - job.started if job.started else 0.0
        attempts = job.task.policy.attempts if job.task else 0
        head = f"{name}[{tid}] attempt {job.delivery.num_delivered}/{attempts or '?'}"
        if isinstance(decision, Ack):
            log.info("succeeded %s in %.3fs", head, took, extra=MAY_WAIT)
        elif isinstance(decision, Nak):
            error = outcome.error if isinstance(outcome, Failure) else None
            log.warning("retry %s in %.1fs: %r", head, decision.delay, error)
        else:
            log.error("dead-lettered %s (%s): %s", head, decision.reason, _why(decision, outcome))


def _described(queues: list[str], setups: list[QueueSetup]) -> str:
    """`default,orders (3 streams)`: a queue's stream count when it is partitioned."""
    streams = Counter(s.queue for s in setups)
    return ",".join(q if streams[q] <= 1 else f"{q} ({streams[q]} streams)" for q in queues)


def _where(setup: QueueSetup) -> str:
    part = "" if setup.partition is None else f" partition {setup.partition}"
    return f"queue {setup.queue}{part}"


def _verdict(decision: Decision) -> str:
    return "ack" if isinstance(decision, Ack) else "nak" if isinstance(decision, Nak) else "dead"


def _why(decision: Dead, outcome: Outcome | None) -> str:
    if isinstance(outcome, Failure):
        return f"{type(outcome.error).__name__}: {outcome.error}"
    return decision.detail
