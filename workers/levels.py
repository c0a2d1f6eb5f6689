"""Priority levels: a fetch loop per level that has tasks waiting, started on demand.

A task of priority N != 5 waits on its level's subject `<prefix>.r.<queue>.<N>.<task>`,
served by the level's own consumer (a stream delivers in arrival order: only separate
consumers let a worker choose which level to take from). The worker looks, twice a second
per stream, which levels hold messages (one stream-info request with a subject filter), and
runs a fetch loop for each such level; the slots a worker frees go to
the highest-level loop waiting for them (workers/slots.py), so under a backlog higher
levels are delivered first by every worker. A level's loop ends once its level is drained.
The default level (5, the queue's own subject, unchanged for foreign producers) is the
queue's usual fetch loop, always running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from taskq.app import App
from taskq.client import Client
from taskq.errors import TaskqError
from taskq.workers.setup import QueueSetup, ensure_level

log = logging.getLogger("taskq.worker")

LOOK_EVERY = 0.5  # seconds between looks at a stream's levels


class Levels:
    """Starts the fetch loops of the priority levels of the worker's queue streams."""

    def __init__(
        self,
        app: App,
        client: Client,
        mains: list[QueueSetup],
        spawn: Callable[[QueueSetup], Coroutine[Any, Any, None]],
    ) -> None:
        self.app = app
        self.client = client
        self.mains = mains
        self._spawn = spawn
        self._running: dict[str, asyncio.Task[None]] = {}

    async def run(self, stopping: asyncio.Event) -> None:
        """Look for waiting levels until `stopping`; then wait for the level loops."""
        while not stopping.is_set():
            for main in self.mains:
                with contextlib.suppress(TaskqError):  # the next look may pass
                    await self._look(main)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), LOOK_EVERY)
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def _look(self, main: QueueSetup) -> None:
        names = self.client.names
        state = await self.client.connection.streams.state(
            main.stream, subjects_filter=names.levels_filter(main.queue, main.partition)
        )
        waiting = {names.level_of(subject) for subject, n in state.subjects.items() if n}
        new = {}
        for level in sorted((lv for lv in waiting if lv is not None), reverse=True):
            key = f"{main.stream}/{names.level_consumer(main.queue, level)}"
            if key not in self._running:
                new[key] = await ensure_level(self.app, self.client, main, level)
        # every new level's loop starts in the same turn, highest first: they queue for slots
        # together and the highest level gets the next free one (a loop started while the
        # others' consumers were still being set up would take slots ahead of its level)
        for key, setup in new.items():
            loop = asyncio.create_task(self._spawn(setup))
            self._running[key] = loop
            loop.add_done_callback(lambda _, k=key: self._running.pop(k, None))  # type: ignore[misc]
