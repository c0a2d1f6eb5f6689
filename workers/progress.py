"""Writing running tasks' progress reports: the latest per task, a few times a second.

`report` may be called from any thread (a `def` task's) as often as the task likes: it only
keeps the latest value. A ticker on the worker's loop writes what changed every `interval`,
and `flush` writes a task's last report before the task settles, so the final value is
never lost to the rate limit. A task's writes are stored in the order their reports were
taken: the ticker may still be writing an older report (its first write waits for the
bucket) when `flush` takes the last one, which must not be overwritten by it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from taskq.client import Client
from taskq.context import TaskContext
from taskq.errors import TaskqError
from taskq.records.clock import now_iso
from taskq.records.progress import Progress, ensure_progress, write
from taskq.workers.ticker import Ticker

log = logging.getLogger("taskq.worker")


class ProgressWriter:
    """The worker's pending progress reports and the ticker that writes them."""

    def __init__(self, client: Client, interval: float = 0.25) -> None:
        self._client = client
        self._interval = interval
        self._pending: dict[str, Progress] = {}
        self._lock = threading.Lock()  # reports come from task threads too
        self._loop = asyncio.get_running_loop()
        self._ticker = Ticker("progress writing", self._tick, lambda: self._interval)
        self.started = False  # a report was taken (none yet: nothing to flush)
        self._ready = False
        # per task, the write of the report taken last: the next one waits for it
        self._last: dict[str, asyncio.Future[None]] = {}

    def report(self, ctx: TaskContext, value: float | dict[str, Any], message: str | None) -> None:
        """Keep `value` as the task's latest report (thread-safe, no I/O)."""
        report = Progress(value=value, message=message, attempt=ctx.attempt, at=now_iso())
        with self._lock:
            self._pending[ctx.id] = report
        if not self.started:  # the first report starts the ticker (from any thread)
            self.started = True
            self._loop.call_soon_threadsafe(self._ticker.start)

    async def _tick(self) -> None:
        await self._write_pending()

    async def _write_pending(self) -> None:
        """Write every pending report, each in its task's turn."""
        with self._lock:
            due, self._pending = self._pending, {}
        places = {task_id: self._place(task_id) for task_id in due}  # taken in this order
        for task_id, report in due.items():
            await self._write_in_turn(task_id, report, *places[task_id])

    async def flush(self, task_id: str) -> None:
        """Write the task's last unwritten report now (before it settles), after any
        earlier report of it still being written."""
        with self._lock:
            report = self._pending.pop(task_id, None)
        if report is None:
            earlier = self._last.get(task_id)
            if earlier is not None:  # its last report is being written: stored first
                await earlier
            return
        await self._write_in_turn(task_id, report, *self._place(task_id))

    def _place(self, task_id: str) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """This report's turn among the task's writes: (the write before it, its own)."""
        mine: asyncio.Future[None] = self._loop.create_future()
        earlier = self._last.get(task_id)
        self._last[task_id] = mine
        return earlier, mine

    async def _write_in_turn(
        self,
        task_id: str,
        report: Progress,
        earlier: asyncio.Future[None] | None,
        mine: asyncio.Future[None],
    ) -> None:
        try:
            if earlier is not None:
                await earlier
            await self._write(task_id, report)
        finally:
            mine.set_result(None)
            if self._last.get(task_id) is mine:
                del self._last[task_id]

    async def _write(self, task_id: str, report: Progress) -> None:
        try:
            if not self._ready:
                await ensure_progress(self._client)
                self._ready = True
            await write(self._client, task_id, report)
        except TaskqError as exc:  # progress is informative: never fail a task for it
            log.warning("progress of %s not stored: %s", task_id, exc)

    async def close(self) -> None:
        await self._ticker.close()
        await self._write_pending()
