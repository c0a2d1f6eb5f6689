"""The worker's heartbeat record (`taskq workers`): one write per interval,
whatever the task rate, and a delete when the worker stops."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from taskq.client import Client
from taskq.errors import TaskqError
from taskq.records.clock import now_iso
from taskq.records.heartbeats import RunningTask, WorkerRecord, ensure_workers
from taskq.workers.ticker import Ticker

log = logging.getLogger("taskq.worker")
LISTED = 1000  # running tasks named in one beat, at most (the record stays small)
RATE_SPAN = 10.0  # seconds the rates a record carries are measured over (3 beats at least)


class Heartbeat:
    """Writes `record` refreshed with `counts()` and `running()` every `interval` seconds."""

    def __init__(
        self,
        client: Client,
        record: WorkerRecord,
        counts: Callable[[], dict[str, int]],
        running: Callable[[], list[RunningTask]],
        problem: Callable[[], str | None] = lambda: None,
        tallies: Callable[[], dict[str, int]] = dict,
    ) -> None:
        self._client = client
        self.record = record
        self._counts = counts
        self._tallies = tallies
        # (when, tallies) of recent beats: rates are over the last RATE_SPAN seconds
        self._samples: deque[tuple[float, dict[str, int]]] = deque()
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

    def _rates(self) -> dict[str, dict[str, float]]:
        """Per queue, tasks settled and copies published per second over the last
        RATE_SPAN seconds (or since the first beat): a rate limit starts its tasks in
        bursts, so one beat's count alone jumps between none and many."""
        now, tallies = time.monotonic(), self.record.tallies
        span = max(RATE_SPAN, 3 * self._client.settings.heartbeat)
        while len(self._samples) > 1 and now - self._samples[1][0] >= span:
            self._samples.popleft()
        first = self._samples[0] if self._samples else None
        self._samples.append((now, tallies))
        if first is None or now <= first[0]:
            return {}
        elapsed, before = now - first[0], first[1]
        rates: dict[str, dict[str, float]] = {}
        for key, count in tallies.items():
            kind, _, queue = key.partition(":")
            rate = round((count - before.get(key, 0)) / elapsed, 3)
            rates.setdefault(queue, {"settled": 0.0, "copied": 0.0})[kind] = rate
        return rates

    async def _beat(self) -> None:
        self.record.heartbeat_at = now_iso()
        self.record.counts = self._counts()
        self.record.tallies = self._tallies()
        self.record.rates = self._rates()
        self.record.running = self._running()[:LISTED]
        self.record.problem = self._problem()
        body = self.record.model_dump_json().encode()
        try:
            await self._client.connection.kv.put(
                self._client.names.workers_bucket, self.record.key, body
            )
        except TaskqError as exc:  # a missed beat is survivable: the TTL spans three
            log.warning("heartbeat not stored: %s", exc)
