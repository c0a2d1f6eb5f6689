"""`Ticker`: the one way the worker does something periodically (extend leases, renew
per-key slots, write progress, beat its heartbeat).

A ticker runs `tick()` every `interval()` seconds on the worker's loop while `active()` says
there is something to do, started on demand by `start()` (cheap to call per task: it only
starts a loop when none runs) and stopped by `close()`. A tick that raises is logged and the
next tick runs anyway: a periodic job never dies silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("taskq.worker")


class Ticker:
    """Calls `tick` every `interval()` seconds while `active()` (default: until closed)."""

    def __init__(
        self,
        name: str,
        tick: Callable[[], Awaitable[None]],
        interval: Callable[[], float],
        active: Callable[[], bool] = lambda: True,
    ) -> None:
        self.name = name  # for the log line of a failing tick
        self._tick = tick
        self._interval = interval
        self._active = active
        self._task: asyncio.Task[None] | None = None
        # True from `start` until the loop ends: a caller per task reads it, not a call
        self.running = False

    def start(self) -> None:
        """Run the loop unless it runs already (must be called on the worker's loop)."""
        if not self.running:
            self._task = asyncio.create_task(self._run())
            self.running = True

    async def _run(self) -> None:
        try:
            while self._active():
                await asyncio.sleep(self._interval())
                try:
                    await self._tick()
                except Exception:  # the next tick may pass; a dead ticker would hide it
                    log.exception("%s failed; trying again next tick", self.name)
        finally:
            self.running = False

    async def close(self) -> None:
        """Stop the loop (a tick under way is interrupted) and wait until it has stopped."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.running = False  # also when it was cancelled before its first step
