"""The Worker: pulls tasks from shared durable consumers, runs them, and settles each one.

Per queue, a fetch loop reserves free slots first and fetches at most that many messages,
so a worker never holds work it cannot start (no prefetch starvation). Every message is
judged (`taskq.workers.judge`) and settled exactly one way (`taskq.workers.settle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import TYPE_CHECKING

from taskq.app import App
from taskq.client import Client
from taskq.errors import BrokerError, ConnectionLost, NotFound, TaskqError, TransientError
from taskq.nats import Delivery, Puller
from taskq.workers.assembly import Parts, Shape, assemble, beside, start
from taskq.workers.executors import runners_for
from taskq.workers.handback import hand_back
from taskq.workers.job import Job
from taskq.workers.lease import Leases
from taskq.workers.limits import Limits
from taskq.workers.setup import QueueSetup, described, prepare, set_up
from taskq.workers.slots import Slots

if TYPE_CHECKING:
    from taskq.workers.spark.session import SparkRuntime

log = logging.getLogger("taskq.worker")


class Worker:
    """Consumes `queues` of `app` with up to `concurrency` tasks running at once."""

    lost: ConnectionLost | None = None  # set when its connection died for good

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
        pool_size: int | None = None,
        limits: Limits | None = None,
        fetch_budget: int | None = None,
    ) -> None:
        self.app = app
        self._timings = app.settings.timings
        self.queues = list(queues or app.queues() or ["default"])
        self.concurrency = concurrency
        self.grace = grace
        self.fetch_timeout = fetch_timeout
        self.max_batch = max_batch
        self.sweeper = sweeper
        self.stats: Counter[str] = Counter()
        self._slots = Slots(concurrency, fetch_budget)  # budget: --max-tasks-per-child
        self._stopping = asyncio.Event()
        self._ready = asyncio.Event()
        self._running: dict[tuple[str, int], asyncio.Task[None]] = {}  # by stream and seq
        self._setups: dict[str, QueueSetup] = {}
        self._leases = Leases()
        # made by `run` once connected, each with what it needs
        self._client: Client | None = None
        self._parts: Parts | None = None
        mine = [t for t in app.tasks.values() if t.queue in self.queues]
        # Spark and process tasks (if any) run here; `spark` shares a session across workers
        lent, settings = self._slots.lent, app.settings
        self._runners = runners_for(settings, mine, concurrency, lent, spark, pool_size, limits)
        self._failing: dict[str, str] = {}  # fetch loop -> why its last fetch failed

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

    @property
    def fetched_all(self) -> bool:
        """Its --max-tasks-per-child deliveries fetched, and none still running."""
        return self._slots.spent

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until streams and consumers are set up and fetching has begun."""
        await asyncio.wait_for(self._ready.wait(), timeout)

    async def run(self) -> None:
        """Run until `stop()`, then settle running tasks (NAKed past grace). HookError: a
        start hook failed (nothing was fetched)."""
        client = self._client = await self.app.client()
        self._setups = await set_up(self.app, client, self.queues)
        await self.app.hooks.run_start()
        await self._runners.start()
        shape = Shape(
            self.queues, self.concurrency, self.stats, self._runners, self._leases, self.problem
        )
        parts = self._parts = assemble(self.app, client, shape)
        await start(client, parts)
        self._log_ready()
        loops = [asyncio.create_task(self._consume(key)) for key in self._setups]
        loops.append(asyncio.create_task(self._watch_connection(client)))
        mains = [s for s in self._setups.values() if s.lane is None]
        levels = (mains, self._consume_level)
        stopping, linger = self._stopping, self.fetch_timeout
        loops += beside(self.app, client, parts, shape, stopping, levels, linger, self.sweeper)
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await self._shut_down(client, loops)
        if self.lost is not None:
            raise self.lost

    def problem(self) -> str | None:
        """Why this worker is unhealthy (a fetch loop whose last fetch failed), or None."""
        if not self._failing:
            return None
        key, why = next(iter(self._failing.items()))
        more = f" (+{len(self._failing) - 1} more)" if len(self._failing) > 1 else ""
        return f"fetching from {key} fails: {why}{more}"

    async def _watch_connection(self, client: Client) -> None:
        """Stop at once when the connection dies for good: nothing could settle, and a
        live process doing nothing would hide it. `run` then raises ConnectionLost."""
        waiting = asyncio.create_task(client.connection.wait_lost())
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            stopping.cancel()
        if waiting.done() and not waiting.cancelled() and not self.stopping:
            self.lost = ConnectionLost(self.app.settings.url)
            self.grace = 0.0  # running tasks cannot settle: they come back after ack_wait
            self.stop()

    def _log_ready(self) -> None:
        log.info(
            "worker ready: queues %s; concurrency %d; prefix %s",
            described(self.queues, list(self._setups.values())),
            self.concurrency,
            self.app.settings.prefix,
        )
        if len(self._setups) > self.concurrency:
            log.warning(
                "%d streams to consume but concurrency %d: an idle stream holds a slot while "
                "it waits, so some wait their turn; raise -c",
                len(self._setups),
                self.concurrency,
            )

    async def _shut_down(self, client: Client, loops: list[asyncio.Task[None]]) -> None:
        self._stopping.set()
        self._slots.wake()
        await asyncio.gather(*loops, return_exceptions=True)
        await self._finish_running()
        parts = self._parts
        if parts is not None:  # grouped verdicts settled now, then the control plane stops
            await parts.settler.drain()
            await parts.control.close()
        await self._runners.close()
        await self._leases.close()
        if parts is not None:
            await parts.admission.close()
        with contextlib.suppress(TaskqError):
            await client.connection.flush()
        self._runners.abandon_threads()
        await self.app.hooks.run_stop()
        log.info("worker stopped: %s", dict(self.stats))

    async def _finish_running(self) -> None:
        if not self._running:
            return
        _, pending = await asyncio.wait(set(self._running.values()), timeout=self.grace)
        for job in pending:  # past grace: cancelled jobs NAK themselves for redelivery
            job.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)

    # -- fetching --------------------------------------------------------------------------
    async def _consume_level(self, setup: QueueSetup) -> None:
        """The fetch loop of one priority level, while it has tasks (workers/levels.py)."""
        self._setups[setup.key] = setup
        try:
            await self._consume(setup.key)
        finally:
            self._setups.pop(setup.key, None)

    async def _consume(self, key: str) -> None:
        puller: Puller | None = None
        want = 1
        while not self.stopping:
            setup = self._setups[key]
            taken = await self._slots.reserve(want, level=setup.level)
            if self.stopping:
                self._slots.unused(taken)
                break
            asked = taken
            linger = self._timings.level_linger if setup.on_demand else self.fetch_timeout
            try:
                if puller is None:
                    puller = await self._connected().connection.pull(setup.stream, setup.durable)
                # each delivery starts the moment it arrives, on a slot reserved for it
                async for delivery in puller.stream(taken, linger):
                    taken -= 1
                    self._start(setup, delivery)
                if self._failing:  # `where` is built only when a failure is on record
                    self._failing.pop(setup.where, None)
            except (TransientError, BrokerError) as exc:
                self._failing[setup.where] = str(exc)[:200]
                puller = await self._recover(setup, puller, exc)
            finally:
                self._slots.unused(taken)
            if setup.on_demand and (puller is None or taken == asked):
                break  # its level is drained (or gone): the level watcher restarts it
            # Ask for twice what came last time: a lingering request holds its slots until
            # it fills or expires, and another queue or partition may need them meanwhile;
            # a backlog still reaches full batches in a few round trips.
            want = min(self.max_batch, max(1, 2 * (asked - taken)))
        if puller is not None:
            await puller.close()

    async def _recover(
        self, setup: QueueSetup, puller: Puller | None, exc: TaskqError
    ) -> Puller | None:
        """After a failed fetch: back off, and re-create the consumer if it vanished. A
        priority level's loop just ends (None): its watcher starts it again if need be."""
        if setup.on_demand:
            if puller is not None:
                await puller.close()
            return None
        log.warning("fetch from %s failed: %s", setup.where, exc)
        if isinstance(exc, NotFound) or not isinstance(exc, TransientError):
            with contextlib.suppress(TaskqError):
                fresh = await prepare(self.app, self._connected(), [setup.queue])
                self._setups.update((s, fresh[s]) for s in self._setups.keys() & fresh.keys())
            if puller is not None:
                await puller.close()
            puller = None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=self._timings.loop_retry)
        return puller

    def _start(self, setup: QueueSetup, delivery: Delivery) -> None:
        # Fetched while stopping too, it runs (handing it back costs an attempt). A redelivery
        # of one still handled here (a late lease beat) is not run twice: that one settles;
        # nor of one that has just ended here: the copy is settled as the message ended.
        key = (delivery.stream, delivery.seq)
        assert self._parts is not None
        if key in self._running or key in self._parts.settler.settling:
            self.stats["redelivered_here"] += 1
            return self._slots.unused(1)
        termed = self._leases.ended_as(delivery)
        if termed is not None:  # sent again before the server had this worker's settle
            self.stats["redelivered_here"] += 1
            self._leases.settle_copy(delivery, termed)
            return self._slots.unused(1)
        state = Job(setup, delivery, setup.queue, delivery.num_delivered)
        job = self._running[key] = state.handler = asyncio.create_task(self._handle(state))
        job.add_done_callback(lambda _: self._done(key))

    def _done(self, key: tuple[str, int]) -> None:
        del self._running[key]
        self._slots.release(1)

    def _connected(self) -> Client:
        if self._client is None:
            raise RuntimeError("worker is not running")
        return self._client

    # -- handling one delivery --------------------------------------------------------------
    async def _handle(self, job: Job) -> None:
        """One delivery from judgement to settle (the judge runs the task if it may run)."""
        parts = self._parts
        assert parts is not None
        settling = False
        try:
            decision, outcome = await parts.judge.judge(job)
            settling = True
            await parts.settler.settle(job, decision, outcome)
        except asyncio.CancelledError:
            # Shutdown past grace: another worker runs it, at no cost of an attempt
            with contextlib.suppress(Exception):
                await asyncio.shield(hand_back(self._connected(), job))
            self.stats["interrupted"] += 1
        except Exception as exc:  # whatever one message does, the loop goes on
            await self._failed(job, exc, settling)
        finally:
            if job.task is not None and job.task.limits is not None:  # its per-key slot, if any
                await asyncio.shield(parts.admission.release(job))
            d = job.delivery  # its lease, unless a settle group settles it (and releases it)
            if (d.stream, d.seq) not in parts.settler.settling:
                self._leases.release(d)

    async def _failed(self, job: Job, exc: Exception, settling: bool) -> None:
        """An error taskq did not expect while handling one message. Judging it failed on
        something of its own (its body, its arguments): it is dead-lettered as `crashed`
        with the traceback, never redelivered in a loop. A transient NATS failure, or one
        while settling (its verdict may be half written), hands it back for later, as does
        a dead letter that cannot be written."""
        assert self._parts is not None
        if settling or isinstance(exc, TransientError | BrokerError):
            log.warning("handling seq %s failed, handed back: %r", job.delivery.seq, exc)
        else:
            log.error("judging seq %s failed: %r; dead-lettering it", job.delivery.seq, exc)
            try:
                await self._parts.settler.settle_crashed(job, exc)
                return
            except Exception:  # the dead letter could not be written
                log.exception("dead-lettering seq %s failed; handed back", job.delivery.seq)
        with contextlib.suppress(Exception):
            await job.delivery.nak(delay=self._timings.failed_again)
