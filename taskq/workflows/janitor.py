"""Journal subjects with no run: what a role wrote on `<prefix>.wf.<id>.u.*` (signals,
cancels: producers may) for an id that never started. A run's own events go when it
expires (taskq.workflows.end); these have no run to expire, so a worker sweeps them.

Each pass lists the `u` subjects and, for the ids among them, whether a start exists (one
direct get each, at most IDS_A_PASS); an id found without a start twice in a row loses
what was stored on its subjects before the earlier pass (a purge bounded by sequence): a
run started since keeps everything stored after its start, and what came before a start
is no part of its journal anyway (taskq.workflows.store.read). Nothing here may fail a
worker: a pass that fails is logged and tried again at the next."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from taskq.client import Client
from taskq.errors import NotFound, TaskqError

log = logging.getLogger("taskq.worker")
IDS_A_PASS = 1000  # ids looked at in one pass, at most (a bounded cost)


@dataclass
class Janitor:
    """One worker's sweeps of startless journal subjects."""

    client: Client
    suspects: set[str] = field(default_factory=set)  # ids without a start at the last pass
    below: int = 0  # the stream's next sequence at the last pass

    async def sweep(self) -> int:
        """One pass; how many messages it purged."""
        connection, names = self.client.connection, self.client.names
        stream = names.workflows_stream
        try:
            state = await connection.streams.state(stream, names.journal_filter("*", "u"))
        except NotFound:  # no stream: no workflow ran under this prefix yet
            return 0
        ids = sorted({_run_of(names.prefix, subject) for subject in state.subjects})
        startless = {run for run in ids[:IDS_A_PASS] if not await self._started(run)}
        purged = 0
        for run in sorted(startless & self.suspects):
            within = names.journal_filter(run, "*")
            purged += await connection.messages.purge(stream, within, before_seq=self.below)
        self.suspects, self.below = startless, state.last_seq + 1
        if purged:
            log.info("workflow journals: %d message(s) of ids with no run removed", purged)
        return purged

    async def _started(self, run: str) -> bool:
        """Whether the run's start is stored (an error raises: never taken for a no)."""
        names = self.client.names
        subject = names.journal_subject(run, "s", "0")
        found = await self.client.connection.messages.batch(names.workflows_stream, 1, 1, subject)
        return bool(found)


def _run_of(prefix: str, subject: str) -> str:
    """The run id (its safe form) in `<prefix>.wf.<run>.u.<key>`."""
    return subject[len(prefix) + 4 :].rsplit(".", 2)[0]


async def run_janitor(client: Client, stopping: asyncio.Event) -> None:
    """Sweep every `timings.janitor_every` seconds until `stopping` is set; never raises."""
    every = client.settings.timings.janitor_every
    janitor = Janitor(client)
    while not stopping.is_set():
        try:
            await asyncio.wait_for(stopping.wait(), every)
            return
        except TimeoutError:
            pass
        try:
            await janitor.sweep()
        except TaskqError as exc:
            log.warning("workflow journals not swept: %s", exc)
        except Exception:  # a sweep must never end the worker
            log.exception("workflow journals not swept: unexpected error")
