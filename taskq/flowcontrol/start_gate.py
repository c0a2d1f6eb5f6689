"""The last check before a rate-limited task's body starts: its reserved start must not
have slipped (taskq.flowcontrol.rates).

A rate limit promises that no window of its length holds more starts of task bodies than
its limit. Starts are reserved `slack` further apart than the window asks, so a body that
starts up to `slack` after its reserved start keeps the promise; the gate lets a body go
up to half of it late, leaving the other half for the moment between the gate and the
body. What runs between the admission and the body (the event loop under load, a thread
pool on a busy CPU, the middleware) can make it later than that: then the gate, the last
thing before the body (in the task's thread for a `def` task), reserves a fresh start,
giving the slipped one back in the same write (no body started at it, so a slip spends
one start, not two), and waits for it, or, when that start is further off than a worker
waits, raises StartSlipped so the task is held with the fresh reservation's ticket. A
late body never starts into the next window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from taskq.clock import Clock
from taskq.errors import TaskqError
from taskq.flowcontrol.rates import Verdict, slipped

READMITS = 8  # fresh starts a gate reserves in a row before it holds the task anyway
WAIT_LOOP = 30.0  # seconds a thread waits for the event loop's re-admission, at most


class StartSlipped(TaskqError):
    """The body's reserved start slipped and the fresh one is too far off: hold the task
    (with `ticket`, the fresh reservation, when there is one) until `until`."""

    def __init__(self, until: float, ticket: str = "") -> None:
        self.until = until
        self.ticket = ticket
        super().__init__("a rate-limited task's reserved start slipped: held for a fresh one")


class StartGate:
    """One admitted task's reserved start, checked right before its body starts."""

    def __init__(
        self,
        start: float,
        slack: float,
        readmit: Callable[[str], Awaitable[Verdict]],
        loop: asyncio.AbstractEventLoop,
        key: str = "",
        clock: Clock | None = None,
        ticket: str = "",
    ) -> None:
        self.start = start
        self.ticket = ticket  # the reservation of `start`: given back should it slip
        self.clock = clock or Clock()  # the worker's app's (taskq.clock)
        self.key = key  # the limit's key (a held task is grouped by it)
        self.slack = slack
        self.readmit = readmit
        self.loop = loop
        self.slipped = 0  # fresh starts reserved after a slip (for tests and logs)

    def _late(self) -> bool:
        return slipped(self.start, self.slack, self.clock.time())

    def _next(self, fresh: Verdict) -> float:
        """The fresh start to wait for; StartSlipped when there is none soon."""
        self.slipped += 1
        if fresh.start is None:
            raise StartSlipped(fresh.until, fresh.ticket)
        self.start, self.ticket = fresh.start, fresh.ticket
        return max(0.0, fresh.start - self.clock.time())

    async def passed(self) -> None:
        """On the event loop, right before an `async def` body (or a process or Spark
        dispatch): returns when the body may start now."""
        for _ in range(READMITS):
            if not self._late():
                return
            await asyncio.sleep(self._next(await self.readmit(self.ticket)))
        raise StartSlipped(self.clock.time() + self.slack)

    def passed_in_thread(self) -> None:
        """In the task's thread, right before a `def` body: the same, re-admitting on the
        worker's event loop."""
        for _ in range(READMITS):
            if not self._late():
                return
            readmitted = _awaited(self.readmit, self.ticket)
            future = asyncio.run_coroutine_threadsafe(readmitted, self.loop)
            time.sleep(self._next(future.result(WAIT_LOOP)))
        raise StartSlipped(self.clock.time() + self.slack)


async def _awaited(readmit: Callable[[str], Awaitable[Verdict]], ticket: str) -> Verdict:
    return await readmit(ticket)
