"""Gathering the deliveries of one Spark batch task into Spark jobs.

Each delivery's handler submits its item and awaits the item's own outcome, then settles
its message through the worker's ordinary path; so every message keeps its lease, and is
acked, retried or dead-lettered on its own. A batch is sealed when `batch_size` items are
in, or `max_wait` seconds after its first item arrived, and runs as one Spark job.

Back-pressure: at most `RUNNING` batches run at once and one more waits sealed; while one
waits, `submit` blocks, its delivery keeps its worker slot, and the worker stops fetching.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from taskq.batching import Batching
from taskq.errors import TaskTimeout
from taskq.ids import new_id
from taskq.policy import Failure, Outcome

RUNNING = 2  # batches of one task running at once: the next one's driver work overlaps

Call = tuple[tuple[Any, ...], dict[str, Any]]
RunBatch = Callable[[list[Call], str], Awaitable[list[Outcome]]]


@dataclass
class _Item:
    call: Call
    future: asyncio.Future[Outcome] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Batcher:
    """Items of one batch task, gathered into batches and run by `run` (items, tag)."""

    def __init__(self, batching: Batching, run: RunBatch) -> None:
        self.batching = batching
        self._run_batch = run
        self._gathering: list[_Item] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sealed: deque[list[_Item]] = deque()
        self._runs: set[asyncio.Task[None]] = set()
        self._room = asyncio.Event()

    async def submit(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> asyncio.Future[Outcome]:
        """Add an item (waiting while a sealed batch queues); its outcome comes in the future."""
        while self._sealed:
            self._room.clear()
            await self._room.wait()
        item = _Item((args, kwargs))
        self._gathering.append(item)
        if len(self._gathering) >= self.batching.batch_size:
            self._seal()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.batching.max_wait, self._seal)
        return item.future

    def _seal(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._gathering:
            self._sealed.append(self._gathering)
            self._gathering = []
        self._pump()

    def _pump(self) -> None:
        while self._sealed and len(self._runs) < RUNNING:
            run = asyncio.create_task(self._run(self._sealed.popleft()))
            self._runs.add(run)
            run.add_done_callback(self._finished)
        if not self._sealed:
            self._room.set()

    def _finished(self, run: asyncio.Task[None]) -> None:
        self._runs.discard(run)
        self._pump()

    async def _run(self, batch: list[_Item]) -> None:
        items = [item for item in batch if not item.future.done()]  # waiters gone: skip
        if not items:
            return
        me = asyncio.current_task()
        abandoned = functools.partial(_cancel_if_abandoned, items, me)
        for item in items:
            item.future.add_done_callback(abandoned)
        tag = f"taskq-batch-{new_id()}"
        try:
            outcomes = await self._run_batch([item.call for item in items], tag)
        except TaskTimeout as exc:  # the whole job ran past the task's timeout
            outcomes = [Failure(exc)] * len(items)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the job itself failed: every item gets the error
            outcomes = [Failure(exc, _trace(exc))] * len(items)
        for item, outcome in zip(items, outcomes, strict=True):
            if not item.future.done():
                item.future.set_result(outcome)

    async def close(self) -> None:
        """At shutdown: drop waiting items (their handlers NAK) and cancel running jobs."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for batch in [self._gathering, *self._sealed]:
            for item in batch:
                item.future.cancel()
        self._gathering, self._sealed = [], deque()
        self._room.set()
        for run in list(self._runs):
            run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._runs, return_exceptions=True)


def _cancel_if_abandoned(
    items: list[_Item], run: asyncio.Task[Any] | None, _: asyncio.Future[Outcome]
) -> None:
    """When every waiter of a running batch was cancelled (shutdown past grace), stop its job."""
    if run is not None and not run.done() and all(i.future.cancelled() for i in items):
        run.cancel()


def _trace(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(exc))
