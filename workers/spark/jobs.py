"""The worker's Spark executor: attempts of Spark job tasks, and the items of Spark batch tasks
run as one distributed job per batch, each item with its own outcome.

A job task's function gets the SparkSession first and runs on the driver side in a thread;
every Spark job it submits is tagged with the task id, so a timeout, a cancellation or the
worker's shutdown cancels them (docs/spark.md). A batch task's items are gathered by a
`Batcher` and run as one job over `workers/spark/items.py`: with `mapPartitions` on a
classic session, with `mapInArrow` over Spark Connect, which has no RDD API.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import pickle
import re
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from taskq.errors import RemoteItemError, SparkUnavailable, TaskTimeout
from taskq.policy import Failure, Outcome, Success
from taskq.settings import Settings
from taskq.task import Task
from taskq.workers.spark import connect
from taskq.workers.spark import items as spark_items
from taskq.workers.spark.batcher import Batcher, Call
from taskq.workers.spark.session import SparkRuntime

if TYPE_CHECKING:
    from taskq.workers.slots import LendSlot


class SparkExecutor:
    """Runs the Spark tasks of one worker on its `SparkRuntime` (made here if not given)."""

    def __init__(
        self, settings: Settings, tasks: list[Task[Any, Any]], runtime: SparkRuntime | None = None
    ) -> None:
        self.runtime = runtime or SparkRuntime(settings)
        self._owns_runtime = runtime is None
        self._batchers: dict[str, Batcher] = {}
        spark_tasks = [t for t in tasks if t.executor == "spark"]
        self.runtime.pools.update(pool_of(t) for t in spark_tasks)
        if spark_tasks:  # fail at start, with the fix, rather than on every attempt
            self.runtime.check()

    async def run(
        self,
        task: Task[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        task_id: str,
        lend_slot: LendSlot,
    ) -> Outcome:
        """One attempt of `task`; never raises (but cancellation)."""
        if task.batch is None:
            return await self._run_job(task, args, kwargs, task_id)
        future = await self._batcher(task).submit(args, kwargs)
        # while the item waits for its batch, its slot lets the worker fetch the rest
        with lend_slot():
            return await future

    async def close(self) -> None:
        """Cancel what is still gathering or running; stop the session if we made it."""
        for batcher in self._batchers.values():
            await batcher.close()
        self._batchers.clear()
        if self._owns_runtime:
            await self.runtime.stop()

    # -- job tasks ---------------------------------------------------------------------------
    async def _run_job(
        self, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], task_id: str
    ) -> Outcome:
        tag = job_tag(task_id)
        try:
            session = await self.runtime.session()  # start-up does not count against timeout
            self.runtime.ship(task.fn)
            fn = functools.partial(task.fn, session, *args, **kwargs)
            call = functools.partial(self.runtime.run_tagged, tag, pool_of(task), fn)
            value = await self.runtime.supervise(call, tag, task.name, task.timeout)
        except asyncio.CancelledError:
            raise
        except TaskTimeout as exc:
            return Failure(exc)
        except Exception as exc:
            return Failure(self._unavailable(exc), traceback.format_exc())
        return Success(value)

    def _unavailable(self, exc: Exception) -> Exception:
        """`exc`, or SparkUnavailable when it ended the Connect session: the cluster failed,
        not the task, so it is retried whatever the task's `retry_for`."""
        if not self.runtime.lost(exc):
            return exc
        lost = SparkUnavailable(
            f"Spark Connect at {self.runtime.shown} went away ({type(exc).__name__})",
            "the attempt is retried on a new session",
        )
        lost.__cause__ = exc
        return lost

    # -- batch tasks -------------------------------------------------------------------------
    def _batcher(self, task: Task[Any, Any]) -> Batcher:
        batcher = self._batchers.get(task.name)
        if batcher is None:
            assert task.batch is not None
            run = functools.partial(self._run_batch, task)
            batcher = self._batchers[task.name] = Batcher(task.batch, run)
        return batcher

    async def _run_batch(self, task: Task[Any, Any], calls: list[Call], tag: str) -> list[Outcome]:
        session = await self.runtime.session()
        self.runtime.ship(task.fn)
        collect = collect_frames if self.runtime.frames else collect_rdd
        run = functools.partial(collect, session, task.fn, calls, self.runtime.parallelism)
        call = functools.partial(self.runtime.run_tagged, tag, pool_of(task), run)
        try:
            rows = await self.runtime.supervise(call, tag, task.name, task.timeout)
        except (TaskTimeout, asyncio.CancelledError):
            raise
        except Exception as exc:  # every item of the batch gets it
            error = self._unavailable(exc)
            if error is exc:
                raise
            raise error from exc
        return decode_outcomes(rows, len(calls))


def collect_rdd(
    session: Any, fn: Callable[..., Any], calls: list[Call], slices: Callable[[], int]
) -> list[Any]:
    """One Spark job over the batch with the RDD API (a classic session: the fastest path):
    a partition per core, an outcome per item."""
    rows = [(index, args, kwargs) for index, (args, kwargs) in enumerate(calls)]
    partition = functools.partial(spark_items.run_partition, fn)
    parts = _parts(len(rows), slices)
    return list(session.sparkContext.parallelize(rows, parts).mapPartitions(partition).collect())


def collect_frames(
    session: Any, fn: Callable[..., Any], calls: list[Call], slices: Callable[[], int]
) -> list[Any]:
    """One Spark job over the batch with the DataFrame API (`mapInArrow`): what Spark
    Connect offers, and what a classic session runs too."""
    return connect.collect_frames(session, fn, calls, _parts(len(calls), slices))


def _parts(items: int, slices: Callable[[], int]) -> int:
    """Partitions for a batch of `items`: one per core the cluster offers, none empty."""
    return max(1, min(items, slices()))


def decode_outcomes(rows: list[Any], count: int) -> list[Outcome]:
    """Per-item outcomes, in item order, from what `run_partition` reported."""
    missing = Failure(RemoteItemError("LostItem", "the Spark job reported no outcome"))
    outcomes: list[Outcome] = [missing] * count
    for index, ok, payload in rows:
        outcomes[index] = _success(payload) if ok else _failure(*payload)
    return outcomes


def _success(payload: bytes) -> Outcome:
    try:
        return Success(pickle.loads(payload))
    except Exception as exc:  # the result's class is not importable here
        return Failure(exc, traceback.format_exc())


def _failure(pickled: bytes | None, type_name: str, message: str, trace: str) -> Failure:
    error: BaseException = RemoteItemError(type_name, message)
    if pickled is not None:
        with contextlib.suppress(Exception):  # not importable here: keep the stand-in
            error = pickle.loads(pickled)
    return Failure(error, trace)


def job_tag(task_id: str) -> str:
    """A Spark job tag for a task id (tags may not contain commas)."""
    return "taskq-" + re.sub(r"[^\w.-]", "_", task_id)


def pool_of(task: Task[Any, Any]) -> str:
    """The FAIR scheduler pool of a task: its jobs share one, other tasks' jobs do not wait."""
    return f"taskq.{task.name}"
