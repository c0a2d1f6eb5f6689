"""The worker's heartbeat record (`taskq workers`): one write per interval,
whatever the task rate, and a delete when the worker stops."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from taskq.client import Client
from taskq.errors import TaskqError
from taskq.records.clock import now_iso
from taskq.records.heartbeats import RunningTask, WorkerRecord, ensure_workers
from taskq.workers.ticker import Ticker

log = logging.getLogger("taskq.worker")
LISTED = 1000  # running tasks named in one beat, at most (the record stays small)


class Heartbeat:
    """Writes `record` refreshed with `counts()` and `running()` every `interval` seconds."""

    def __init__(
        self,
        client: Client,
        record: WorkerRecord,
        counts: Callable[[], dict[str, int]],
        running: Callable[[], list[RunningTask]],
        problem: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._client = client
        self.record = record
        self._counts = counts
        self._running = running
        self._problem = problem
        self._ticker = Ticker("heartbeat", self._beat, lambda: client.settings.heartbeat)

    async def first(self) -> None:
        """The bucket and the first beat, awaited before the worker's first fetch (a worker
        that runs a task is already listed), then one beat every interval until `close`."""
        with contextlib.suppress(TaskqError):
            await ensure_workers(self._client)
        await self._beat()
        self._ticker.start()

    async def close(self) -> None:
        """Stop beating and remove the record: the worker is gone from `taskq workers`."""
        await self._ticker.close()
        with contextlib.suppress(TaskqError):
            await self._client.connection.kv.delete(
                self._client.names.workers_bucket, self.record.key
            )

    async def _beat(self) -> None:
        self.record.heartbeat_at = now_iso()
        self.record.counts = self._counts()
        self.record.running = self._running()[:LISTED]
        self.record.problem = self._problem()
        body = self.record.model_dump_json().encode()
        try:
            await self._client.connection.kv.put(
                self._client.names.workers_bucket, self.record.key, body
            )
        except TaskqError as exc:  # a missed beat is survivable: the TTL spans three
            log.warning("heartbeat not stored: %s", exc)
