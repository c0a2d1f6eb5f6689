"""Writing running tasks' progress reports: the latest per task, a few times a second.

`report` may be called from any thread (a `def` task's) as often as the task likes: it only
keeps the latest value. A ticker on the worker's loop writes what changed every `interval`,
and `flush` writes a task's last report before the task settles, so the final value is
never lost to the rate limit.
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
        self._started = False
        self._ready = False

    def report(self, ctx: TaskContext, value: float | dict[str, Any], message: str | None) -> None:
        """Keep `value` as the task's latest report (thread-safe, no I/O)."""
        report = Progress(value=value, message=message, attempt=ctx.attempt, at=now_iso())
        with self._lock:
            self._pending[ctx.id] = report
        if not self._started:  # the first report starts the ticker (from any thread)
            self._started = True
            self._loop.call_soon_threadsafe(self._ticker.start)

    async def _tick(self) -> None:
        with self._lock:
            due, self._pending = self._pending, {}
        for task_id, report in due.items():
            await self._write(task_id, report)

    async def flush(self, task_id: str) -> None:
        """Write the task's last unwritten report now (before it settles)."""
        with self._lock:
            report = self._pending.pop(task_id, None)
        if report is not None:
            await self._write(task_id, report)

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
        with self._lock:
            left, self._pending = self._pending, {}
        for task_id, report in left.items():
            await self._write(task_id, report)
