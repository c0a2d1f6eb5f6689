"""The worker's side of the control plane: its heartbeat record, the cancel
requests it follows, and the progress its tasks report (`taskq workers`, `taskq cancel`,
`handle.watch()`)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from taskq import __version__
from taskq.client import Client
from taskq.records.heartbeats import (
    COPIED_IN,
    SETTLED_IN,
    WorkerRecord,
    list_workers,
    started_record,
)
from taskq.telemetry import FREE_SLOTS
from taskq.workers.cancel_watch import CancelWatch
from taskq.workers.heartbeat import Heartbeat
from taskq.workers.history import HistoryFeed
from taskq.workers.progress import ProgressWriter
from taskq.workers.running import RunningJobs

log = logging.getLogger("taskq.worker")
COUNTED = ("succeeded", "retried", "dead", "cancelled")


class ControlPlane:
    """Started before the worker's first fetch, closed after its last settle."""

    def __init__(
        self,
        client: Client,
        running: RunningJobs,
        stats: Counter[str],
        record: WorkerRecord,
        problem: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._client = client
        self._stats = stats
        self._running = running
        self.cancels = CancelWatch(running.cancel)
        self.progress = ProgressWriter(client)
        self.record = record  # this worker as its heartbeat describes it
        self._heartbeat = Heartbeat(
            client, record, self._counts, running.listed, problem, self._tallies
        )
        self.history = HistoryFeed(client)  # what this worker settled, by window

    async def start(self) -> None:
        """Follow cancel requests (loaded before returning), beat once (stored before
        returning), then every interval."""
        await self.cancels.start(self._client)
        await self._heartbeat.first()
        self.history.start()
        FREE_SLOTS.watch(self)

    @property
    def free_slots(self) -> int:
        """The worker's slots not running an attempt (`taskq.worker.free_slots`)."""
        return max(0, self.record.concurrency - len(self._running.jobs))

    async def close(self) -> None:
        FREE_SLOTS.forget(self)
        await self.history.close()
        await self._heartbeat.close()
        await self.cancels.close()
        await self.progress.close()

    def _counts(self) -> dict[str, int]:
        return {name: self._stats[name] for name in COUNTED}

    def _tallies(self) -> dict[str, int]:
        """Its per-queue tallies (settled, copied), for the rates its record carries."""
        return {k: v for k, v in self._stats.items() if k.startswith((SETTLED_IN, COPIED_IN))}


def worker_record(
    queues: list[str], concurrency: int, pool_size: int | None, tasks: list[str] | None = None
) -> WorkerRecord:
    return started_record(queues, concurrency, pool_size, __version__, tasks)


async def notice_task_sets(client: Client, mine: WorkerRecord) -> list[str]:
    """Warn (once each, at start) of live workers sharing a queue with this one that run
    other tasks there: during a rolling deploy that is expected (a task only the newer
    code knows waits for a worker that knows it: `unknown_task_grace`); otherwise two apps
    share a queue, and each one's tasks wait on the other's workers. The lines warned."""
    told: list[str] = []
    for other in await list_workers(client):
        shared = set(other.queues) & set(mine.queues)
        if other.id == mine.id or not shared or not other.tasks:
            continue
        ours = {t for t in mine.tasks if t.split(":", 1)[0] in shared}
        theirs = {t for t in other.tasks if t.split(":", 1)[0] in shared}
        if ours != theirs:
            told.append(_differ(other, sorted(theirs - ours), sorted(ours - theirs)))
    for line in told[:3]:
        log.warning("%s", line)
    return told


def _differ(other: WorkerRecord, only_theirs: list[str], only_ours: list[str]) -> str:
    def some(names: list[str]) -> str:
        return ", ".join(names[:5]) + (f" (+{len(names) - 5})" if len(names) > 5 else "") or "-"

    return (
        f"worker {other.id} on a queue this one consumes runs other tasks: only it "
        f"{some(only_theirs)}; only this one {some(only_ours)}. Expected during a rolling "
        "deploy; otherwise give each app its own prefix or queues (docs/operations.md)"
    )


async def durability_notice(client: Client, monitor: str | None, stopping: asyncio.Event) -> None:
    """A server that acknowledges before fsync breaks promise 1 on an OS crash: say so, in
    the background, and give up at once when the worker stops (docs/operations.md)."""
    # imported here: the doctor's checks are ~35 ms of imports a worker needs once
    from taskq.doctor.monitor import warn_if_not_durable

    notice = asyncio.create_task(warn_if_not_durable(client.connection, monitor))
    stopped = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait({notice, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        notice.cancel()
        stopped.cancel()
