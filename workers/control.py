"""The worker's side of the control plane: its heartbeat record, the cancel
requests it follows, and the progress its tasks report (`taskq workers`, `taskq cancel`,
`handle.watch()`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from taskq import __version__
from taskq.client import Client
from taskq.records.heartbeats import WorkerRecord, started_record
from taskq.workers.cancel_watch import CancelWatch
from taskq.workers.heartbeat import Heartbeat
from taskq.workers.progress import ProgressWriter
from taskq.workers.running import RunningJobs

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
        self.cancels = CancelWatch(running.cancel)
        self.progress = ProgressWriter(client)
        self._heartbeat = Heartbeat(client, record, self._counts, running.listed, problem)

    async def start(self) -> None:
        """Follow cancel requests (loaded before returning), beat once (stored before
        returning), then every interval."""
        await self.cancels.start(self._client)
        await self._heartbeat.first()

    async def close(self) -> None:
        await self._heartbeat.close()
        await self.cancels.close()
        await self.progress.close()

    def _counts(self) -> dict[str, int]:
        return {name: self._stats[name] for name in COUNTED}


def worker_record(queues: list[str], concurrency: int, pool_size: int | None) -> WorkerRecord:
    return started_record(queues, concurrency, pool_size, __version__)
