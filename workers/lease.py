"""Keeping a running task's lease: in-progress acks so long tasks are never redelivered.

`in_progress()` resets the server's ack timer (DESIGN §3); sending it every ack_wait/3
leaves two chances to spare. The keeper is stopped when the task stops, which its
`timeout` bounds, so a stuck task's lease is not extended forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from taskq.errors import TaskqError
from taskq.jetstream import Delivery

log = logging.getLogger("taskq.worker")


async def _keep(delivery: Delivery, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await delivery.in_progress()
        except TaskqError as exc:  # a missed beat is survivable; the next one may pass
            log.debug("lease extension failed for seq %s: %s", delivery.seq, exc)


@contextlib.asynccontextmanager
async def leased(delivery: Delivery, ack_wait: float) -> AsyncIterator[None]:
    """Extend `delivery`'s lease every ack_wait/3 while the block runs."""
    keeper = asyncio.create_task(_keep(delivery, max(ack_wait / 3.0, 0.05)))
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
