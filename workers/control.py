"""The worker's side of the control plane: its heartbeat in the registry, the cancel
requests it follows, and the progress its tasks report (`taskq workers`, `taskq cancel`,
`handle.watch()`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable

from taskq import __version__
from taskq.client import Client
from taskq.errors import TaskqError
from taskq.registry import RunningTask, WorkerRecord, stamp, started_record
from taskq.workers.cancel_watch import CancelWatch
from taskq.workers.heartbeat import Heartbeat
from taskq.workers.judge import Job, Judge
from taskq.workers.progress import ProgressWriter

COUNTED = ("succeeded", "retried", "dead", "cancelled")


class ControlPlane:
    """Started before the worker's first fetch, closed after its last settle."""

    def __init__(
        self,
        client: Client,
        judge: Judge,
        stats: Counter[str],
        problem: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._client = client
        self._judge = judge
        self._stats = stats
        self._problem = problem
        self.cancels = CancelWatch(judge.cancel)
        self.progress = ProgressWriter(client)
        self._stopping = asyncio.Event()
        self._beat: asyncio.Task[None] | None = None

    async def start(self, record: WorkerRecord) -> None:
        """Follow cancel requests (loaded before returning), take progress, beat once (stored
        before returning), then every interval."""
        await self.cancels.start(self._client)
        self._judge.cancels = self.cancels
        self._judge.reporter = self.progress.report
        beat = Heartbeat(self._client, record, self._counts, self._running, self._problem)
        await beat.first()
        self._beat = asyncio.create_task(beat.run(self._stopping))

    async def settling(self, job: Job) -> None:
        """Before a job settles: its last progress report is stored first."""
        if job.envelope is not None and job.context is not None:
            await self.progress.flush(job.envelope.id)

    async def close(self) -> None:
        self._stopping.set()
        if self._beat is not None:
            with contextlib.suppress(TaskqError):
                await self._beat
        await self.cancels.close()
        await self.progress.close()

    def _counts(self) -> dict[str, int]:
        return {name: self._stats[name] for name in COUNTED}

    def _running(self) -> list[RunningTask]:
        found = []
        for job in list(self._judge.running.values()):
            if job.envelope is None or job.context is None:
                continue
            found.append(
                RunningTask(
                    id=job.envelope.id,
                    task=job.envelope.task,
                    queue=job.queue,
                    attempt=job.context.attempt,
                    started_at=stamp(job.context.started),
                )
            )
        return found


def worker_record(queues: list[str], concurrency: int, pool_size: int | None) -> WorkerRecord:
    return started_record(queues, concurrency, pool_size, __version__)
