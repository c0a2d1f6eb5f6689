"""`RunningJobs`: the attempts under way in one worker, by result key, for the control plane
(cancels stop them, the heartbeat lists them); and why the last attempts of messages whose
outcome the server refused to store were handed back, for their dead letters."""

from __future__ import annotations

from collections import OrderedDict

from taskq.records.clock import stamp
from taskq.records.heartbeats import RunningTask
from taskq.workers.job import Job

UNSTORED = 1000  # messages whose unstored outcome a worker remembers


class RunningJobs:
    """The jobs whose attempt is running, by their task's result key (`safe_id`)."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        # (stream, seq) -> why its outcome could not be stored, the last UNSTORED of them:
        # a message whose attempts run out that way is dead-lettered naming the cause,
        # not as a worker that died (the server counts each hand-back as a delivery)
        self._unstored: OrderedDict[tuple[str, int], str] = OrderedDict()

    def unstored(self, stream: str, seq: int, why: str) -> None:
        """Note that this message's outcome could not be stored (it is handed back)."""
        self._unstored[(stream, seq)] = why[:500]
        self._unstored.move_to_end((stream, seq))
        while len(self._unstored) > UNSTORED:
            self._unstored.popitem(last=False)

    def why_unstored(self, stream: str, seq: int) -> str | None:
        """Why this message's last outcome could not be stored (None: not noted here)."""
        return self._unstored.get((stream, seq))

    def cancel(self, key: str) -> None:
        """Stop the running attempt of the task with result key `key`, if any: interrupt
        it where that is possible (async, process pool, Spark: its jobs are cancelled by
        tag), else flag it (threads)."""
        job = self.jobs.get(key)
        if job is None:
            return
        job.cancel_requested = True
        if job.context is not None:
            job.context.cancelled = True
        interruptible = job.task is not None and (
            job.task.is_async or job.task.executor in ("process", "spark")
        )
        if interruptible and job.running is not None:
            job.running.cancel()

    def listed(self) -> list[RunningTask]:
        """The running attempts as the worker's heartbeat record lists them."""
        found = []
        for job in list(self.jobs.values()):
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
