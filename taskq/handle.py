"""Handles to enqueued tasks: ids, waiting for results, progress, cancelling."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from taskq.client import ClientSource, Published
from taskq.errors import TaskDropped
from taskq.records.cancels import CancelReport, cancel
from taskq.records.progress import Progress, latest, watch
from taskq.records.results import ResultRecord, fetch, wait

if TYPE_CHECKING:
    from taskq.portal import Portal


class HandleSource(ClientSource, Protocol):
    """What a handle needs of its App: the loop's Client, and the portal for sync calls."""

    @property
    def portal(self) -> Portal: ...


@dataclass(frozen=True)
class TaskHandle:
    """An enqueued task: its id, where it went, and whether the server saw it before.

    `duplicate` is True when the server's dedup window already held a message with the
    same id (an idempotency key reused), or a `unique_for`/`debounce` window already held
    this call: nothing new was stored. `dropped` is True when a `throttle` window dropped
    the call (its result says so: `result()` raises TaskDropped).
    """

    id: str
    task: str
    queue: str
    seq: int
    duplicate: bool = False
    app: HandleSource | None = field(default=None, compare=False, repr=False)
    dropped: bool = False
    # a dropped call's (reason, kept run's id): known here at once, and recorded by the
    # worker that takes its marked message (producers write no results)
    drop: tuple[str, str] = field(default=("", ""), compare=False, repr=False)

    @classmethod
    def of(cls, published: Published, app: HandleSource) -> TaskHandle:
        return cls(
            published.id, published.task, published.queue, published.seq, published.duplicate, app
        )

    def _app(self) -> HandleSource:
        if self.app is None:
            raise RuntimeError("this handle is not bound to an App: use app.handle(task_id)")
        return self.app

    async def result(self, timeout: float | None = None) -> Any:
        """The task's return value once it succeeded; raises TaskFailed if it was
        dead-lettered, ResultTimeout if nothing final arrives within `timeout` seconds."""
        if self.dropped:
            raise TaskDropped(self.id, *self.drop)
        if self._unrecorded():
            from taskq.operate import unrecorded  # a task without records only: on first use

            record = await unrecorded.outcome(self._app(), self.id, timeout)
        else:
            record = await wait(self._app(), self.id, timeout)
        record.raise_if_failed(self.id)
        return record.result

    def result_sync(self, timeout: float | None = None) -> Any:
        """`result()` for synchronous code."""
        return self._app().portal.run(self.result(timeout))

    async def status(self) -> str:
        """`queued` (no record yet), `running` (a worker's last heartbeat lists it),
        `failed` (retrying), `succeeded`, `dead`, `cancelled` or `dropped`. A
        `store_result=False` task, whose success writes no record, is `succeeded` once its
        message left the queue without a failure (taskq.operate.unrecorded); a bare id's
        handle with no record and no message anywhere is `unknown`."""
        from taskq.operate import unrecorded  # queues, heartbeats, schedules: on first use

        if self._unrecorded():
            return await unrecorded.state(self._app(), self.id)
        if self.dropped:
            return "dropped"
        record = await fetch(self._app(), self.id)
        if record is not None:
            return record.state
        if self.task:  # a task that records its end: none yet
            return await unrecorded.queued_or_running(self._app(), self.id)
        # a bare id (`app.handle(id)`): its task may keep no record; `unknown` when it is in
        # no queue and has no record (gone unrecorded, purged, expired, or never enqueued)
        return await unrecorded.state(self._app(), self.id, gone="unknown")

    def _unrecorded(self) -> bool:
        """True when the handle's task keeps no record of a success (as its App knows it)."""
        tasks = getattr(self.app, "tasks", None)
        task = tasks.get(self.task) if isinstance(tasks, dict) else None
        return task is not None and not task.store_result

    async def cancel(self) -> CancelReport:
        """Cancel the task: one not started never runs; a running one is stopped (see
        `taskq.records.cancels`). The report says what was found: `cancelled`, `cancelling`
        (running: its worker stops it), `finished` (too late) or `unknown`."""
        return await cancel(self._app(), self.id)

    def cancel_sync(self) -> CancelReport:
        """`cancel()` for synchronous code."""
        return self._app().portal.run(self.cancel())

    async def progress(self) -> Progress | None:
        """The latest progress the task reported (None: none yet)."""
        return await latest(self._app(), self.id)

    async def watch(self) -> AsyncIterator[Progress]:
        """Progress reports as they come, until the task ends (then the iteration stops;
        `result()` tells how it ended)."""
        async for item in watch(self._app(), self.id):
            if isinstance(item, ResultRecord):
                return
            yield item
