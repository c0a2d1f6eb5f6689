"""Bounded concurrency as reservable slots, so a worker never fetches more than it can start."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from taskq.flowcontrol.options import DEFAULT_PRIORITY

# `Slots.lent`: a running task's slot lent while it waits (a Spark batch item for its batch)
LendSlot = Callable[[], contextlib.AbstractContextManager[None]]

# A waiting fetch loop of a lower priority level gains one level per AGING seconds it waits:
# a backlog of higher levels is served first, yet a lower level is never starved forever.
AGING = 1.0


@dataclass(eq=False)
class _Waiter:
    level: int
    since: float = field(default_factory=time.monotonic)

    def score(self, now: float) -> tuple[float, float]:
        return (self.level + (now - self.since) / AGING, -self.since)


class Slots:
    """A counter of free execution slots that fetch loops reserve before they pull."""

    def __init__(self, size: int, budget: int | None = None) -> None:
        if size < 1:
            raise ValueError("concurrency must be >= 1")
        self.size = size
        self.free = size
        # deliveries that may still be fetched (None: no end): a recycled worker process
        # (--max-tasks-per-child N) takes its N and no more, as a loaded one did (91 of 40)
        self.budget = budget
        self._woken = False
        self._changed = asyncio.Event()
        # fetch loops waiting for a slot, highest priority level first, then first come
        # first served: a loop that releases and reserves again queues behind its level, so
        # no stream starves while others cycle (and lower levels age, see AGING)
        self._waiting: list[_Waiter] = []

    async def reserve(self, most: int, gather: float = 0.005, level: int = DEFAULT_PRIORITY) -> int:
        """Wait (in turn) for at least one free slot, then take up to `most` of them.
        `level` is the priority level of the fetch loop asking (0-9, higher first).

        While tasks are running and fewer than half the slots are free, wait up to `gather`
        seconds for more to free up: short tasks finish in bursts, and fetching one message
        per finished task would cost a server round trip per message.
        """
        while True:
            if self.budget == 0:  # all it may fetch is fetched (until some comes back)
                await self._budget_back()
                if self.budget == 0:
                    return 0  # the worker stops
                continue
            if self._waiting or self.free <= 0:
                await self._turn(level)
            if self.busy and self.free < self.size // 2:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(gather):
                        while self.free < self.size // 2:
                            self._changed.clear()
                            await self._changed.wait()
            if self.free > 0 and self.budget != 0:  # (another loop may have spent it)
                taken = min(self.free, most, self.budget or most)  # (None: no budget)
                self.free -= taken
                if self.budget is not None:
                    self.budget -= taken
                return taken

    async def _budget_back(self) -> None:
        """Return when a reservation gives budget back unused, or the worker stops."""
        while self.budget == 0 and not self._woken:
            self._changed.clear()
            await self._changed.wait()

    async def _turn(self, level: int) -> None:
        """Return when this caller is first in line and a slot is free."""
        me = _Waiter(level)
        self._waiting.append(me)
        try:
            while self.free <= 0 or self._first() is not me:
                self._changed.clear()
                await self._changed.wait()
        finally:
            self._waiting.remove(me)
            self._changed.set()  # the next in line may go

    def _first(self) -> _Waiter:
        if len(self._waiting) == 1:
            return self._waiting[0]
        now = time.monotonic()
        return max(self._waiting, key=lambda w: w.score(now))

    def release(self, count: int = 1) -> None:
        if count <= 0:
            return
        self.free += count
        self._changed.set()

    def unused(self, count: int) -> None:
        """Give back `count` reserved slots that no delivery took (to the budget too)."""
        if count > 0 and self.budget is not None:
            self.budget += count
        self.release(count)

    @property
    def spent(self) -> bool:
        """The budget fetched, and every slot free again (all of it settled)."""
        return self.budget == 0 and self.free >= self.size

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
        self._woken = True
        self._changed.set()

    @property
    def busy(self) -> int:
        return self.size - self.free
