"""Following cancel requests: the ids every worker must not run, and running ones to stop.

The worker follows the `<PREFIX>_CANCELS` bucket from before its first fetch: the current
requests arrive first, then new ones as they are made, so a check per delivery is a set
lookup, never a round trip.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from taskq.client import Client
from taskq.ids import safe_id
from taskq.nats import KVEntry
from taskq.records.cancels import ensure_cancels


class CancelWatch:
    """The cancel requests in force; `on_cancel(key)` is called for each new one."""

    def __init__(self, on_cancel: Callable[[str], None]) -> None:
        self._on_cancel = on_cancel
        self.keys: set[str] = set()  # safe ids of the tasks cancelled (empty: none)
        self._stop: Callable[[], Awaitable[None]] | None = None

    async def start(self, client: Client) -> None:
        """Load the requests in force, then keep following (returns once loaded)."""
        await ensure_cancels(client)
        self._stop = await client.connection.kv.follow(client.names.cancels_bucket, self._seen)

    def requested(self, task_id: str) -> bool:
        """Whether task `task_id` was cancelled (the judge looks only while `keys` holds
        any: a plain delivery does not come here)."""
        return safe_id(task_id) in self.keys

    def _seen(self, entry: KVEntry) -> None:
        if entry.deleted:
            self.keys.discard(entry.key)
            return
        self.keys.add(entry.key)
        self._on_cancel(entry.key)

    async def close(self) -> None:
        if self._stop is not None:
            await self._stop()
