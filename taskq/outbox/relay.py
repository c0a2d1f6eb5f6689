"""The relay: publishes an app's committed outbox rows and deletes each once the server
has stored it (or its dead letter). Run by `taskq outbox relay MODULE:APP --db URL`, or
inside `taskq worker --outbox URL`.

Each pass is one database transaction: take up to `batch` rows (locked), publish them,
delete the published, commit. A relay killed between publish and commit leaves its rows;
the next pass publishes them again with the same `Nats-Msg-Id` and the stream's dedup
window (`duplicate_window`, 2 minutes by default) drops the repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter

from sqlalchemy.ext.asyncio import AsyncEngine

from taskq.app import App
from taskq.client import Client
from taskq.dlq.stream import ensure_dlq
from taskq.errors import PermissionDenied, TaskqError, TransientError
from taskq.outbox.claim import claim, remove
from taskq.outbox.database import checked, shown
from taskq.outbox.publish import relay
from taskq.outbox.report import Reporter
from taskq.outbox.wake import Waker

log = logging.getLogger("taskq.outbox")
BATCH = 1000  # rows per pass: one atomic batch per stream at most (taskq.bulk.BATCH)
POLL = 1.0  # seconds between passes when nothing wakes the relay (SQLite; a lost LISTEN)


class Relay:
    """One relay of `app`'s rows in the database at `url`; `stats` counts what it did."""

    def __init__(self, app: App, url: str, *, batch: int = BATCH, poll: float = POLL) -> None:
        self.app, self.url, self.batch, self.poll = app, url, batch, poll
        self.stats: Counter[str] = Counter()
        self._stopping = asyncio.Event()
        self.ready = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Relay until `stop()`: passes while rows come, else wait to be woken."""
        client = await self.app.client()
        await ensure_dlq(client)
        database, waker = await checked(self.url), Waker(self.url)
        reporter = Reporter(client, self.url, database)
        await waker.listen()
        log.info("outbox relay ready: %s, prefix %s", shown(self.url), self.app.settings.prefix)
        self.ready.set()
        try:
            while not self._stopping.is_set():
                relayed = await self._pass(client, database)
                reporter.maybe_report(self.stats)
                if relayed < self.batch:
                    await self._wait(waker, self.poll if relayed >= 0 else self._backoff())
        finally:
            await reporter.close()
            await waker.close()
            await database.dispose()

    async def _pass(self, client: Client, database: AsyncEngine) -> int:
        """One transaction: rows taken, published, deleted. The rows taken (-1: a failure,
        the relay backs off)."""
        try:
            async with database.begin() as connection:
                rows = await claim(connection, self.app.settings.prefix, self.batch)
                if not rows:
                    return 0
                self.stats["claimed"] += len(rows)  # taken for publishing (again, after a failure)
                result = await relay(client, self.app, rows)
                await remove(connection, result.done)
            self.stats["published"] += len(result.published)
            self.stats["dead"] += len(result.dead)
            self.stats["dropped"] += len(result.dropped)
            return -1 if result.left else len(rows)
        except PermissionDenied as exc:  # no pass could ever finish: stop, and say why
            raise PermissionDenied(
                f"the outbox relay was refused ({exc}): it publishes tasks, writes dead "
                "letters and its report, so it runs as the worker role (docs/security.md)"
            ) from None
        except TransientError as exc:  # NATS away: the rows wait in the table
            log.warning("outbox: NATS unavailable (%s); rows wait", exc)
        except TaskqError as exc:
            log.error("outbox pass failed: %s", exc)
        except Exception as exc:  # the database away, or refusing: rows wait
            log.warning("outbox: database unavailable (%s: %s)", type(exc).__name__, exc)
        self.stats["failed_passes"] += 1
        return -1

    def _backoff(self) -> float:
        return self.app.settings.timings.loop_retry

    async def _wait(self, waker: Waker, seconds: float) -> None:
        waiting = asyncio.create_task(waker.wait(seconds))
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiting, stopping):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting


async def serve(app: App, url: str, *, batch: int = BATCH, poll: float = POLL) -> None:
    """`taskq outbox relay`: a Relay under signal control (SIGTERM/SIGINT: finish the pass
    under way, then stop)."""
    import signal

    relay_ = Relay(app, url, batch=batch, poll=poll)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, relay_.stop)
    await relay_.run()
    log.info("outbox relay stopped: %s", dict(relay_.stats))
