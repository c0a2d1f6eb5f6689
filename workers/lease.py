"""Keeping running tasks' leases: in-progress acks so long tasks are never redelivered.

`in_progress()` resets the server's ack timer (docs/architecture.md); sending it every ack_wait/3
leaves two chances to spare. One ticker per worker serves every running delivery, so a
short task costs a dict insert and delete, not a timer task of its own. A lease is held
only while its attempt runs, which the task's `timeout` bounds, so a stuck task's lease is
not extended forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from taskq.errors import TaskqError
from taskq.nats import Delivery
from taskq.telemetry import LEASE_EXTENSIONS

log = logging.getLogger("taskq.worker")

MAX_TICK = 0.25  # seconds between checks, at most


class Leases:
    """The worker's set of held leases and the ticker that extends them."""

    def __init__(self) -> None:
        self._held: dict[Delivery, list[float]] = {}  # delivery -> [next beat, interval]
        self._ticker: asyncio.Task[None] | None = None

    def hold(self, delivery: Delivery, ack_wait: float) -> None:
        """Extend `delivery`'s lease every ack_wait/3 until `release` (a pair of calls, not
        a generator context manager: this runs once per task)."""
        interval = max(ack_wait / 3.0, 0.05)
        self._held[delivery] = [time.monotonic() + interval, interval]
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick())

    def release(self, delivery: Delivery) -> None:
        self._held.pop(delivery, None)

    async def _tick(self) -> None:
        while self._held:
            smallest = min(entry[1] for entry in self._held.values())
            await asyncio.sleep(min(MAX_TICK, smallest / 2))
            now = time.monotonic()
            for delivery, entry in list(self._held.items()):
                if now >= entry[0]:
                    entry[0] = now + entry[1]
                    await self._beat(delivery)

    @staticmethod
    async def _beat(delivery: Delivery) -> None:
        try:
            await delivery.in_progress()
        except TaskqError as exc:  # a missed beat is survivable; the next one may pass
            log.debug("lease extension failed for seq %s: %s", delivery.seq, exc)
            return
        LEASE_EXTENSIONS.add(1, {"taskq.queue": queue_of(delivery.subject)})

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker


def queue_of(subject: str) -> str:
    """The queue token of a task subject: `<prefix>.q.<queue>.<task>` or
    `<prefix>.p.<queue>.<partition>.<task>` (a prefix has no dots, so it is the third)."""
    parts = subject.split(".", 3)
    return parts[2] if len(parts) > 2 else ""
