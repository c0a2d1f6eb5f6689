"""The worker's side of flow control: admit a delivery of a limited task, or hold it.

Only tasks with limits come here (`task.limits is not None`); an unlimited task's cost is
that one attribute test in the judge. For a limited task, in order:
1. a redelivery whose previous delivery was already held (the worker died between storing
   the held copy and the ack), or a second copy of a woken parked task, is only
   acknowledged (taskq.flowcontrol.held);
2. a task with `max_concurrency` that arrived outside its lane (a foreign producer, a
   workflow step, a DLQ requeue) is moved into its lane;
3. `max_per_key`: take a slot of the call's key, or park the task until one is free;
4. `rate_limit`: reserve the earliest start that keeps every sliding window within the
   limit, and run then (waiting here for a start within seconds), or hold the task until
   it with a ticket (taskq.flowcontrol.rates); a copy redeeming its ticket runs at its start.
Slots taken are renewed while the task runs and released after it settled, waking the
oldest task parked on that key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from taskq.client import Client
from taskq.errors import TaskqError
from taskq.flowcontrol.held import (
    HELD,
    PARK,
    SLOT_HINT,
    SPENT,
    TICKET,
    UNKNOWN,
    Holder,
    claim,
    group,
    woken_for,
)
from taskq.flowcontrol.keys import ALL, token
from taskq.flowcontrol.options import FlowLimits, key_of
from taskq.flowcontrol.rates import RateWindows, wait_until
from taskq.flowcontrol.slots import KeySlots, Slot
from taskq.flowcontrol.start_gate import StartGate, StartSlipped
from taskq.flowcontrol.store import ensure_limits
from taskq.ids import new_id
from taskq.policy import Hold
from taskq.records.heartbeats import COPIED_IN
from taskq.task import Task
from taskq.workers.job import Job
from taskq.workers.ticker import Ticker

log = logging.getLogger("taskq.worker")
FULL_MEMORY = 0.05  # seconds a key seen full is parked without trying, then looked at again


@dataclass
class Permit:
    """A per-key slot held while a task runs (renewed, then released)."""

    slots: KeySlots
    slot: Slot
    task_id: str
    group: str
    next_beat: float


class Admission:
    """Flow-control checks of one worker, and the slots it holds."""

    def __init__(self, client: Client, stats: Counter[str] | None = None) -> None:
        self.client = client
        self._stats = stats if stats is not None else Counter()  # the worker's: copies woken
        self._holders: dict[str, Holder] = {}
        self._permits: dict[int, Permit] = {}  # by id(job): the slot each running job holds
        self._parked: dict[int, KeySlots] = {}  # by id(job): the key slots it waits for
        self._ticker = Ticker(
            "slot renewal", self._renew, lambda: 0.25, lambda: bool(self._permits)
        )
        self._full: dict[str, float] = {}  # per-key limit -> when this worker saw it full
        self._rechecks: dict[str, asyncio.Task[None]] = {}

    def holder(self, queue: str) -> Holder:
        """The held schedules of `queue` (in its timer stream)."""
        found = self._holders.get(queue)
        if found is None:
            found = self._holders[queue] = Holder(self.client, queue)
        return found

    async def admit(
        self, job: Job, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Hold | None:
        """None when the task may run now (its slots taken), else how it is held."""
        flow, envelope = task.limits, job.envelope
        assert flow is not None and envelope is not None
        holder = self.holder(job.queue)
        park = job.delivery.header(PARK)
        if park and not await claim(self.client, job.delivery, park, task.name):
            return Hold("another copy of this parked task ran", done=True)
        if job.delivery.num_delivered > 1 and await holder.was_held(job.delivery, envelope.id):
            return Hold("held by an earlier delivery", done=True)
        if flow.lane and job.setup.lane != task.name:
            lane = self.client.names.lane_subject(job.queue, task.name, job.setup.partition)
            return Hold("its concurrency lane", group("lane", "-", task.name), target=lane)
        if flow.max_per_key is not None:
            hold = await self._slot(job, task, flow, args, kwargs)
            if hold is not None:
                return hold
        if flow.rate is not None:
            hold = await self._rate(job, task, flow, args, kwargs)
            if hold is not None:
                await self.release(job)  # its key's slot goes to the next one meanwhile
                return hold
        return None

    async def _rate(
        self,
        job: Job,
        task: Task[Any, Any],
        flow: FlowLimits,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Hold | None:
        assert flow.rate is not None
        key = (
            ALL
            if flow.rate_key is None
            else token(key_of(flow.rate_key, task.validator.signature, args, kwargs))
        )
        windows = RateWindows(self.client, task.name, key, flow.rate)
        verdict = await windows.admit(job.delivery.header(TICKET))
        if verdict.start is not None:  # now, or within a moment: wait here, then run
            loop = asyncio.get_running_loop()
            readmit = lambda slipped: windows.admit(None, slipped)  # noqa: E731
            clock, ticket = self.client.clock, verdict.ticket
            job.gate = StartGate(verdict.start, windows.slack, readmit, loop, key, clock, ticket)
            # its lease is held meanwhile (the judge's)
            await wait_until(verdict.start, clock.time())
            return None
        return self._rate_hold(task, flow, key, verdict.until, verdict.ticket)

    def _rate_hold(
        self, task: Task[Any, Any], flow: FlowLimits, key: str, until: float, ticket: str
    ) -> Hold:
        shown = f"rate_limit {flow.rate}" + ("" if key == ALL else f" (key {key})")
        return Hold(shown, group("rate", key, task.name), until, ticket=ticket)

    async def slipped(self, job: Job, task: Task[Any, Any], exc: StartSlipped) -> Hold:
        """How a task whose reserved start slipped (its gate found no start soon) is held:
        with the fresh reservation's ticket, its key's slot released meanwhile."""
        assert task.limits is not None and job.gate is not None
        await self.release(job)
        log.info("task %s: its reserved start slipped; held for a fresh one", task.name)
        return self._rate_hold(task, task.limits, job.gate.key, exc.until, exc.ticket)

    async def _slot(
        self,
        job: Job,
        task: Task[Any, Any],
        flow: FlowLimits,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Hold | None:
        assert flow.concurrency_key is not None and flow.max_per_key is not None
        assert job.envelope is not None
        key = key_of(flow.concurrency_key, task.validator.signature, args, kwargs)
        slots = await self._slots(task.name, token(key), flow.max_per_key, flow.lease)
        limit = group("slot", slots.key, task.name)
        hint = job.delivery.header(SLOT_HINT)
        slot, job.slot_tried = None, True
        if hint or time.monotonic() - self._full.get(limit, 0.0) > FULL_MEMORY:
            slot = await slots.acquire(
                job.envelope.id, int(hint) if hint and hint.isdigit() else None
            )
        if slot is None:
            # Parked until a holder of this key releases (it wakes the oldest parked), or
            # a recheck finds a free slot, or, should both be missed, until a crashed
            # holder's slot has expired. A key just seen full is not tried again: a backlog
            # of one busy key is parked at one publish per task.
            self._full.setdefault(limit, time.monotonic())
            self._parked[id(job)] = slots
            until = self.client.clock.time() + flow.lease + 1.0
            return Hold(f"max_per_key {flow.max_per_key} (key {key!r})", limit, until)
        beat = time.monotonic() + _interval(flow.lease)
        self._permits[id(job)] = Permit(slots, slot, job.envelope.id, limit, beat)
        self._ticker.start()
        return None

    async def _slots(self, task: str, key: str, size: int, ttl: float) -> KeySlots:
        stream = await ensure_limits(self.client)
        return KeySlots(self.client, stream, task, key, size, ttl)

    async def hold(self, job: Job, hold: Hold) -> None:
        """Store the held copy of `job`'s delivery (the settler acknowledges it next)."""
        d, envelope = job.delivery, job.envelope
        assert envelope is not None
        holder = self.holder(job.queue)
        headers = {SPENT: str(job.attempt if hold.retry else job.attempt - 1)}
        if hold.group:  # a limit holds it (no group: a delayed task waiting for its eta)
            headers[HELD] = hold.limit
        if hold.ticket:
            headers[TICKET] = hold.ticket
        if hold.since:
            headers[UNKNOWN] = f"{hold.since:.3f}"
        if id(job) in self._parked:  # parked for a slot: woken by a copy (held.Holder.wake)
            headers[PARK] = new_id()
        until = _moment(hold.until or self.client.clock.time())
        await holder.hold(d, envelope.id, hold.target or d.subject, hold.group, until, headers)

    async def retry_later(self, job: Job, delay: float) -> None:
        """Have the server redeliver the message after its backoff. In a time-skipping test
        the retry is held as a schedule instead (its attempt spent), which the test fires
        once nothing else can run: a redelivery delay ends only by the server's clock."""
        clock = self.client.clock
        if delay <= 0 or not clock.skipping:
            await job.delivery.nak(delay)
            return
        await self.hold(job, Hold("its retry backoff", until=clock.time() + delay, retry=True))
        await job.delivery.ack()

    async def after_hold(self, job: Job) -> None:
        """Tasks parked on a key whose holder released between our look and our park would
        wait for the next release: shortly after parking, look at the key's slots again
        and wake a parked task for each free one (one look per key for a burst of parks)."""
        slots = self._parked.pop(id(job), None)
        if slots is None:
            return
        limit = group("slot", slots.key, slots.task)
        if limit not in self._rechecks:
            self._rechecks[limit] = asyncio.create_task(self._recheck(job.queue, limit, slots))

    async def _recheck(self, queue: str, limit: str, slots: KeySlots) -> None:
        try:
            await asyncio.sleep(FULL_MEMORY)
            self._full.pop(limit, None)
            with contextlib.suppress(TaskqError):
                for _ in range(slots.size - len(await slots.taken())):
                    await self._wake(queue, limit)
        finally:
            self._rechecks.pop(limit, None)

    async def release(self, job: Job) -> None:
        """Give back the slot `job` held, and wake the oldest task parked on its key. A
        woken copy that ended before asking for a slot (cancelled meanwhile) wakes the
        next one in its place: else that one waits for its recheck."""
        self._parked.pop(id(job), None)
        permit = self._permits.pop(id(job), None)
        if permit is None:
            await self._pass_wake_on(job)
            return
        self._full.pop(permit.group, None)
        try:
            await permit.slots.release(permit.slot)
            await self._wake(job.queue, permit.group, {SLOT_HINT: str(permit.slot.index)})
        except TaskqError as exc:  # the slot expires by itself within its TTL
            log.warning("releasing a concurrency slot of %s failed: %s", permit.task_id, exc)

    async def _pass_wake_on(self, job: Job) -> None:
        assert job.task is not None
        limit = None if job.slot_tried else woken_for(job.delivery, job.task.name)
        if limit is None:
            return
        try:
            await self._wake(job.queue, limit)
        except TaskqError as exc:  # the parked task is looked at again at its recheck
            log.warning("passing on the wake of %s failed: %s", limit, exc)

    async def _wake(self, queue: str, limit: str, note: dict[str, str] | None = None) -> None:
        if await self.holder(queue).wake(limit, note):  # a copy back in its queue: no new task
            self._stats[f"{COPIED_IN}{queue}"] += 1

    async def _renew(self) -> None:
        """Renew held slots' TTLs (each every lease/3; looked at every 0.25 s)."""
        now = time.monotonic()
        for permit in list(self._permits.values()):
            if now >= permit.next_beat:
                permit.next_beat = now + _interval(permit.slots.ttl)
                await self._beat(permit)

    async def _beat(self, permit: Permit) -> None:
        try:
            if not await permit.slots.renew(permit.slot, permit.task_id):
                log.warning(
                    "task %s lost its concurrency slot (%s): it expired before renewal",
                    permit.task_id,
                    permit.group,
                )
        except TaskqError as exc:  # a missed renewal is survivable: the next may pass
            log.debug("renewing a concurrency slot failed: %s", exc)

    async def close(self) -> None:
        for recheck in list(self._rechecks.values()):
            recheck.cancel()
        await self._ticker.close()


def _interval(ttl: float) -> float:
    return max(ttl / 3.0, 0.3)


def _moment(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)
