"""`taskq.testing.worker(app)`: a real Worker in the test's event loop, and what it did.

The worker is the one `taskq worker` runs, tuned for tests: pull requests expire after
`FETCH_TIMEOUT` (not 1 s) because stopping waits for the open ones, and the crash-loop
sweeper is off (it serves workers that die mid-task, which an in-process worker does not).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from taskq.app import App
from taskq.client import Client
from taskq.dlq.browse import list_dead
from taskq.dlq.record import DeadLetter
from taskq.errors import ConfigError, NotFound
from taskq.ids import safe_id
from taskq.nats.kv import KeyValue
from taskq.operate.sequence_pages import MAX_WINDOW
from taskq.records.results import ResultRecord
from taskq.testing.drain import drain
from taskq.testing.environment import active
from taskq.testing.skipping import SKIPPING_WAIT, Skipper
from taskq.workers.worker import Worker

FETCH_TIMEOUT = 0.01  # seconds: what stopping the worker waits for at most


class Results(Mapping[str, ResultRecord]):
    """Each task's latest result record (state, result, error, attempts), by task id."""

    def __init__(self, by_key: dict[str, ResultRecord] | None = None) -> None:
        self._by_key = by_key or {}

    def __getitem__(self, task_id: str) -> ResultRecord:
        # ids that are no valid KV key (idempotency keys with any character) are stored
        # under a hash of themselves (taskq.ids.safe_id)
        return self._by_key[safe_id(task_id)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)


class TestWorker:
    """A running Worker of `app`: `drain()` waits for its queues to empty, then `results`
    and `dead` say how each task ended."""

    __test__ = False  # pytest: not a test class

    def __init__(self, app: App, worker: Worker, skipper: Skipper | None = None) -> None:
        self.app = app
        self.worker = worker
        self._skipper = skipper  # time_skipping=True
        self.results = Results()  # as of the last drain()
        self.dead: dict[str, DeadLetter] = {}  # by task id, as of the last drain()

    @property
    def stats(self) -> Mapping[str, int]:
        """What the worker did so far: succeeded, retried, dead, cancelled, ..."""
        return self.worker.stats

    async def drain(self, timeout: float = 30.0) -> None:
        """Return when no task is waiting or in flight in the worker's queues and every
        workflow step and schedule due so far has run; then read `results` and `dead`.
        With time skipping, every schedule that is not periodic runs, the clock moved to
        each in turn. DrainTimeout (a TaskqError) after `timeout` seconds."""
        client = await self.app.client()
        if self._skipper is not None:
            await self._skipper.run(self._settled, timeout, None)
        else:
            await drain(client, self.worker.queues, self._settled, timeout)
        await self._read(client)

    async def advance(self, by: timedelta | float, timeout: float = 30.0) -> None:
        """Time skipping only: move the app's clock `by` forward, running everything that
        falls due on the way in time order (periodic schedules included), then drain and
        read `results` and `dead` as `drain()` does."""
        seconds = by.total_seconds() if isinstance(by, timedelta) else float(by)
        if self._skipper is None:
            raise ConfigError("advance() needs worker(app, time_skipping=True)")
        if not seconds >= 0:
            raise ConfigError(f"advance() goes forward: {by!r}")
        client = await self.app.client()
        until = client.clock.time() + seconds
        await self._skipper.run(self._settled, timeout, until)
        await self._read(client)

    def now(self) -> datetime:
        """The app's time: the wall clock plus what was skipped (taskq.clock)."""
        return self.app.clock.now()

    def _settled(self) -> int:
        return sum(n for k, n in self.worker.stats.items() if ":" not in k)

    async def _read(self, client: Client) -> None:
        self.results = Results(await _records(self.app))
        self.dead = {record.id: record for record in await list_dead(client)}


async def _records(app: App) -> dict[str, ResultRecord]:
    """Each key's latest record in every results bucket, read by sequence with batched
    direct gets (what the server has stored, oldest first: a later revision replaces an
    earlier one), not through a watcher whose end-of-values marker depends on timing."""
    client = await app.client()
    records: dict[str, ResultRecord] = {}
    for bucket in await client.results.existing():
        try:
            await _read_bucket(client.connection.kv, bucket, records)
        except NotFound:
            continue
    return records


async def _read_bucket(kv: KeyValue, bucket: str, records: dict[str, ResultRecord]) -> None:
    await kv.allow_direct_reads(bucket)
    seq, last = await kv.span(bucket)
    while seq and seq <= last:
        got = await kv.window(bucket, seq, min(MAX_WINDOW, last - seq + 1))
        if not got:
            return
        for entry in got:
            if entry.deleted:
                records.pop(entry.key, None)
                continue
            try:
                records[entry.key] = ResultRecord.model_validate_json(entry.value)
            except ValidationError:
                continue  # not a record (another writer's value)
        seq = got[-1].revision + 1


@asynccontextmanager
async def worker(
    app: App,
    queues: list[str] | None = None,
    *,
    concurrency: int = 16,
    time_skipping: bool = False,
    **options: Any,
) -> AsyncIterator[TestWorker]:
    """Run a Worker of `app` (on `queues`: default, those of its tasks) for the block.

    Inside a test that uses the `taskq_server` fixture, `app` is first pointed at that
    server and the test's own prefix. `time_skipping`: what waits for time runs as soon as
    nothing else can (`drain()`, `advance()`; taskq.testing.skipping). Other `options` are
    Worker's (grace, pool_size, ...). A start hook that fails raises here; the app's
    connection is closed at the end.
    """
    options.setdefault("fetch_timeout", FETCH_TIMEOUT)
    options.setdefault("sweeper", False)
    async with _pointed(app, time_skipping):
        running = Worker(app, queues, concurrency=concurrency, **options)
        skipper = Skipper(await app.client(), running.queues) if time_skipping else None
        harness = TestWorker(app, running, skipper)
        job = asyncio.create_task(harness.worker.run())
        try:
            await _started(harness.worker, job)
            yield harness
        finally:
            harness.worker.stop()
            try:
                await asyncio.wait_for(job, timeout=60)
            finally:
                await app.aclose()


@asynccontextmanager
async def _pointed(app: App, time_skipping: bool) -> AsyncIterator[None]:
    """Point `app` at the running test's server for the block (and turn time skipping on:
    the app's own settings and clock come back at the end, however the block ends)."""
    environment = active()
    if environment is not None and environment.adopt(app):
        await app.aclose()  # a connection made before, on this loop, went elsewhere
    if not time_skipping:
        yield
        return
    saved = app.settings
    _skipping(app)
    await app.aclose()  # its next connection has the skipping timings
    try:
        yield
    finally:
        app.settings = saved
        app.clock.reset()


def _skipping(app: App) -> None:
    """Turn time skipping on for `app`: a retry's backoff is held as a schedule, and a
    worker waits in-process only for what is due within `SKIPPING_WAIT`."""
    timings = app.settings.timings.model_copy(update={"in_worker_wait": SKIPPING_WAIT})
    app.configure(timings=timings)
    app.clock.skipping = True


async def _started(running: Worker, job: asyncio.Task[None]) -> None:
    """Wait until the worker fetches, or raise why it could not start (e.g. HookError)."""
    ready = asyncio.create_task(running.wait_ready())
    await asyncio.wait({ready, job}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        ready.cancel()
        job.result()  # raises the start-up error
        raise RuntimeError("the worker stopped before it was ready")
    ready.result()
