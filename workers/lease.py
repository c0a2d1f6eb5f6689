"""Keeping running tasks' leases: in-progress acks so long tasks are never redelivered.

`in_progress()` resets the server's ack timer (docs/architecture.md); sending it every ack_wait/3
leaves two chances to spare. One ticker per worker serves every running delivery, so a
short task costs a dict insert and delete, not a timer task of its own. A lease is held
while the delivery is judged: its waits in the worker (bounded: an eta or reserved start
due within `timings.in_worker_wait`) and its attempt, which the task's `timeout` bounds, so
a stuck task's lease is not extended forever.

A lease's end is remembered too: if beats came late (an event loop stalled past ack_wait),
the server may have sent the message again before it had the worker's ack, and that copy
can arrive after the settle. The worker then settles the copy the way the message ended
instead of running it again (`ended_as`, `settle_copy`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from taskq.errors import TaskqError
from taskq.nats import Delivery
from taskq.telemetry import LEASE_EXTENSIONS
from taskq.workers.ticker import Ticker

log = logging.getLogger("taskq.worker")

MAX_TICK = 0.25  # seconds between checks, at most
ENDED = 4096  # deliveries settled for good, remembered for a late copy (~1.5 MB at most)


@dataclass(slots=True)
class _Lease:
    next_beat: float
    interval: float
    queue: str  # for the metric's label


class Leases:
    """The worker's set of held leases and the ticker that extends them."""

    def __init__(self) -> None:
        self._held: dict[Delivery, _Lease] = {}
        self._ticker = Ticker("lease extension", self._tick, self._period, lambda: bool(self._held))
        # (stream, seq) of the latest deliveries settled for good -> (TERMed, ack subject):
        # the subject is kept as received and read only when a copy comes (not per task)
        self._ended: OrderedDict[tuple[str, int], tuple[bool, str]] = OrderedDict()
        self._copies: set[asyncio.Task[None]] = set()

    def hold(self, delivery: Delivery, ack_wait: float, queue: str) -> None:
        """Extend `delivery`'s lease every ack_wait/3 until `release` (a pair of calls, not
        a generator context manager: this runs once per task)."""
        interval = max(ack_wait / 3.0, 0.05)
        self._held[delivery] = _Lease(time.monotonic() + interval, interval, queue)
        if not self._ticker.running:
            self._ticker.start()

    def release(self, delivery: Delivery) -> None:
        self._held.pop(delivery, None)

    def ended(self, delivery: Delivery, termed: bool) -> None:
        """Note `delivery` settled for good: acked, or TERMed when `termed` (not a NAK:
        the server sends a NAKed message again, and that copy is a retry to run)."""
        self._ended[(delivery.stream, delivery.seq)] = (termed, delivery.ack_subject)
        if len(self._ended) > ENDED:
            self._ended.popitem(last=False)

    def ended_as(self, copy: Delivery) -> bool | None:
        """How the message `copy` was sent again for ended here (True: TERMed), or None:
        not a copy (a first delivery, or a message that only shares the sequence number)."""
        if copy.num_delivered < 2:  # every first delivery: no lookup
            return None
        ended = self._ended.get((copy.stream, copy.seq))
        return ended[0] if ended is not None and copy.same_message(ended[1]) else None

    def settle_copy(self, copy: Delivery, termed: bool) -> None:
        """Settle a late copy of a message that ended here the same way, in the background
        (the first settle may not have reached the server: this one then counts)."""

        async def settle() -> None:
            with contextlib.suppress(TaskqError):
                await (copy.term("settled by an earlier delivery") if termed else copy.ack())

        task = asyncio.get_running_loop().create_task(settle())
        self._copies.add(task)
        task.add_done_callback(self._copies.discard)

    @contextlib.contextmanager
    def held(self, delivery: Delivery, ack_wait: float, queue: str) -> Iterator[None]:
        """`hold` for the block, then `release` (a settle that waits for the store keeps
        its message from another worker, which would run it again)."""
        self.hold(delivery, ack_wait, queue)
        try:
            yield
        finally:
            self.release(delivery)

    def _period(self) -> float:
        smallest = min((lease.interval for lease in self._held.values()), default=MAX_TICK * 2)
        return min(MAX_TICK, smallest / 2)

    async def _tick(self) -> None:
        now = time.monotonic()
        for delivery, lease in list(self._held.items()):
            if now >= lease.next_beat:
                lease.next_beat = now + lease.interval
                await self._beat(delivery, lease.queue)

    @staticmethod
    async def _beat(delivery: Delivery, queue: str) -> None:
        try:
            await delivery.in_progress()
        except TaskqError as exc:  # a missed beat is survivable; the next one may pass
            log.debug("lease extension failed for seq %s: %s", delivery.seq, exc)
            return
        LEASE_EXTENSIONS.add(1, {"taskq.queue": queue})

    async def close(self) -> None:
        await self._ticker.close()
        await asyncio.gather(*self._copies, return_exceptions=True)
