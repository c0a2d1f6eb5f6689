"""The replayers a client ran last, so a resumption replays only what is new, and one lock
per run, so a client decides on a run one decision at a time (the next one then finds the
replayer kept, and often nothing new). Owned by the Client (one per connection and
prefix): two apps in one process may each have a run of the same id."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator

from taskq.client import Client
from taskq.workflows.replay import Replayer

KEPT_RUNS = 1000  # replayers kept per client, most recently used first...
KEPT_BYTES = 256 * 1024 * 1024  # ...holding journals of this many bytes at most


class Replayers:
    """A client's kept replayers (bounded in count and journal bytes) and run locks."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, Replayer] = OrderedDict()
        self._bytes = 0  # what the kept replayers' journals weigh
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # run -> (lock, its users)

    @contextlib.asynccontextmanager
    async def deciding(self, run_id: str) -> AsyncIterator[None]:
        """Hold the run's lock (made on first use, dropped when no one holds or waits)."""
        lock, users = self._locks.get(run_id, (asyncio.Lock(), 0))
        self._locks[run_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[run_id]
            if users == 1:
                del self._locks[run_id]
            else:
                self._locks[run_id] = (lock, users - 1)

    def take(self, run_id: str) -> Replayer | None:
        found = self._kept.pop(run_id, None)
        if found is not None:
            self._bytes -= found.size
        return found

    def keep(self, replayer: Replayer) -> None:
        self._kept[replayer.run_id] = replayer
        self._bytes += replayer.size
        while len(self._kept) > KEPT_RUNS or (self._bytes > KEPT_BYTES and len(self._kept) > 1):
            _, oldest = self._kept.popitem(last=False)
            self._bytes -= oldest.size
            oldest.close()


def kept(client: Client) -> Replayers:
    """The client's replayers."""
    return client.cached("replayers", Replayers)
