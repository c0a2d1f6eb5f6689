"""The worker's part of the history (taskq.records.history): what it settled, added to the
server's windows every `timings.history_every` seconds.

The settle path only appends an attempt's run time to a list keyed by (queue, task, verdict)
(`HistoryFeed.pending`: no taskq code runs per task); a flush bins those lists and merges them
into each window's record with compare-and-set, so any number of workers count into one
record per window. What cannot be stored now (no server, a store that refuses) is kept and
merged at the next flush, up to `UNSENT` windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from dataclasses import replace

from taskq.client import Client
from taskq.errors import TaskqError
from taskq.records.history import FINE, RESOLUTIONS, Window, decode
from taskq.retrying import retry_transient
from taskq.topology.specs import history_stream
from taskq.workers.ticker import Ticker

log = logging.getLogger("taskq.worker")
NAMES = 1000  # task names with a series of their own, per worker (the rest: queue and all)
UNSENT = 20_000  # windows kept for a later flush when they cannot be stored, at most
TRIES = 8  # compare-and-set attempts of one window per flush (other workers write it too)
IN_FLIGHT = 64  # window writes awaiting their acks at once
AGAIN_AFTER = 300.0  # seconds before a worker tries again a history stream it could not make
SUCCEEDED, FAILED, RETRIED = "s", "f", "r"  # the verdicts `pending` is keyed by

Pending = defaultdict[tuple[str, str, str], list[float]]


class HistoryFeed:
    """One worker's counts and run times, flushed to the `<PREFIX>_HISTORY` windows."""

    def __init__(self, client: Client) -> None:
        self._client = client
        # (queue, registered task name or "", verdict) -> run times (-1: it did not run)
        self.pending: Pending = defaultdict(list)
        self._unsent: dict[str, Window] = {}  # subject -> counts not yet stored
        self._known: dict[str, tuple[int, Window]] = {}  # subject -> its last stored record
        self._named: set[str] = set()  # task names with a series of their own
        self._stream = ""
        self._refused_until = 0.0  # the stream could not be made (not provisioned, no room)
        self._ticker = Ticker("history", self.flush, lambda: client.settings.timings.history_every)

    def start(self) -> None:
        self._ticker.start()

    async def close(self) -> None:
        """Stop flushing, then flush what the last tasks settled (bounded: a worker that
        cannot reach its server stops anyway)."""
        await self._ticker.close()
        with contextlib.suppress(TaskqError, TimeoutError):
            await asyncio.wait_for(self.flush(), 10.0)

    async def flush(self) -> None:
        """Add what was settled since the last flush to its windows on the server."""
        self._fold(time.time())
        if not self._unsent or not await self._ready():
            return
        limit = asyncio.Semaphore(IN_FLIGHT)
        subjects = list(self._unsent)
        stored = await asyncio.gather(*(self._store(s, limit) for s in subjects))
        for subject, done in zip(subjects, stored, strict=True):
            if done:
                del self._unsent[subject]
        self._forget_old(time.time())

    async def _ready(self) -> bool:
        """Whether the history's stream is there (made on first use when the user may); one
        warning, and another try after AGAIN_AFTER, when it is not."""
        if self._stream:
            return True
        if time.monotonic() < self._refused_until:
            return False
        spec = history_stream(self._client.names, self._client.settings)
        try:
            await retry_transient(lambda: self._client.connection.streams.ensure(spec))
        except TaskqError as exc:
            self._refused_until = time.monotonic() + AGAIN_AFTER
            log.warning("history not kept: %s (trying again in %g s)", exc, AGAIN_AFTER)
            return False
        self._stream = spec.name
        return True

    def _fold(self, now: float) -> None:
        """Move `pending` into the windows (one per series and resolution) it counts in."""
        pending = dict(self.pending)
        self.pending.clear()  # the same dict: the settler holds it
        for (queue, task, verdict), times in pending.items():
            counted = _counted(verdict, times)
            for series in self._series(queue, task):
                for resolution, (length, _) in RESOLUTIONS.items():
                    start = int(now // length) * length
                    subject = self._client.names.history_subject(
                        resolution, series, start // length
                    )
                    window = self._unsent.get(subject)
                    if window is None:
                        window = self._unsent[subject] = Window(start, length)
                    window.add(counted)
        while len(self._unsent) > UNSENT:  # the oldest windows go first
            del self._unsent[next(iter(self._unsent))]
            log.warning("history: windows not stored for a while are dropped")

    def _series(self, queue: str, task: str) -> list[str]:
        series = ["a", f"q.{queue}"]
        if task and (task in self._named or len(self._named) < NAMES):
            self._named.add(task)
            series.append(f"t.{task}")
        return series

    async def _store(self, subject: str, limit: asyncio.Semaphore) -> bool:
        """Merge the unsent counts of `subject`'s window into its record; whether stored."""
        window = self._unsent[subject]
        records, messages = self._client.connection.records, self._client.connection.messages
        kept = RESOLUTIONS["f" if window.length == FINE else "c"][1]
        ttl = kept + window.length  # the window stays until `kept` after it ended
        async with limit:
            for _ in range(TRIES):
                seq, base = self._known.get(subject, (0, Window(window.start, window.length)))
                merged = replace(base, bins=dict(base.bins))
                merged.add(window)
                try:
                    written = await records.replace(subject, merged.encode(), seq, ttl=ttl)
                    if written is not None:
                        self._known[subject] = (written, merged)
                        return True
                    stored = await messages.last(self._stream, subject)  # another worker's
                except TaskqError as exc:
                    log.debug("history window %s not stored now: %s", subject, exc)
                    return False
                fresh = Window(window.start, window.length)
                if stored is None:  # expired meanwhile
                    self._known.pop(subject, None)
                else:  # a record that does not decode (a broken writer's) is replaced
                    self._known[subject] = (stored.seq, decode(stored.data, window.length) or fresh)
        return False

    def _forget_old(self, now: float) -> None:
        """Drop what is known of windows no flush writes again (ended two windows ago)."""
        for subject, (_, window) in list(self._known.items()):
            if window.start + 2 * window.length < now:
                del self._known[subject]


def _counted(verdict: str, times: list[float]) -> Window:
    """The counts and run times of one (queue, task, verdict) list, as a window's."""
    counted = Window(0, 0)
    if verdict == SUCCEEDED:
        counted.succeeded = len(times)
    elif verdict == FAILED:
        counted.failed = len(times)
    else:
        counted.retried = len(times)
    for seconds in times:
        if seconds >= 0:
            counted.ran(seconds)
    return counted
