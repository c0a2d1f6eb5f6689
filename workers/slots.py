"""Bounded concurrency as reservable slots, so a worker never fetches more than it can start."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator


class Slots:
    """A counter of free execution slots that fetch loops reserve before they pull."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("concurrency must be >= 1")
        self.size = size
        self.free = size
        self._changed = asyncio.Event()
        # fetch loops waiting for a slot, first come first served: a loop that releases
        # and reserves again queues behind them, so no stream starves while others cycle
        self._waiting: deque[object] = deque()

    async def reserve(self, most: int, gather: float = 0.005) -> int:
        """Wait (in turn) for at least one free slot, then take up to `most` of them.

        While tasks are running and fewer than half the slots are free, wait up to `gather`
        seconds for more to free up: short tasks finish in bursts, and fetching one message
        per finished task would cost a server round trip per message.
        """
        while True:
            if self._waiting or self.free <= 0:
                await self._turn()
            if self.busy and self.free < self.size // 2:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(gather):
                        while self.free < self.size // 2:
                            self._changed.clear()
                            await self._changed.wait()
            if self.free > 0:
                taken = min(self.free, most)
                self.free -= taken
                return taken

    async def _turn(self) -> None:
        """Return when this caller is first in line and a slot is free."""
        me = object()
        self._waiting.append(me)
        try:
            while self._waiting[0] is not me or self.free <= 0:
                self._changed.clear()
                await self._changed.wait()
        finally:
            self._waiting.remove(me)
            self._changed.set()  # the next in line may go

    def release(self, count: int = 1) -> None:
        if count <= 0:
            return
        self.free += count
        self._changed.set()

    @contextlib.contextmanager
    def lent(self) -> Iterator[None]:
        """Give a held slot back while the block runs, and take it again after.

        For a batch task's item waiting for its batch to fill: the worker fetches the rest
        meanwhile. Taking it back does not wait, so `free` may dip below zero until the
        holder's own release, which `reserve` treats as no free slot.
        """
        self.release(1)
        try:
            yield
        finally:
            self.free -= 1

    def wake(self) -> None:
        """Wake waiters without freeing anything (used at shutdown)."""
        self._changed.set()

    @property
    def busy(self) -> int:
        return self.size - self.free
