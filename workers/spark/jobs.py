"""The worker's Spark executor: attempts of Spark job tasks, and the items of Spark batch tasks
run as one distributed job per batch, each item with its own outcome.

A job task's function gets the SparkSession first and runs on the driver side in a thread;
every Spark job it submits is tagged with the task id, so a timeout, a cancellation or the
worker's shutdown cancels them (docs/spark.md). A batch task's items are gathered by a
`Batcher` and run with `mapPartitions` over `workers/spark/items.py`'s `run_partition`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import pickle
import re
import traceback
from collections.abc import Callable
from typing import Any

from taskq.errors import ConfigError, RemoteItemError, TaskTimeout
from taskq.policy import Failure, Outcome, Success
from taskq.settings import Settings
from taskq.task import Task
from taskq.workers.spark import items as spark_items
from taskq.workers.spark.batcher import Batcher, Call
from taskq.workers.spark.session import SparkRuntime

LendSlot = Callable[[], contextlib.AbstractContextManager[None]]


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
            batch = [t.name for t in spark_tasks if t.batch is not None]
            if batch and self.runtime.is_connect:
                raise ConfigError(
                    f"batch tasks {batch} need Spark's RDD API, which Spark Connect (sc://) "
                    "lacks: run them on local[*], spark://, yarn or k8s://"
                )

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
            return Failure(exc, traceback.format_exc())
        return Success(value)

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
        collect = functools.partial(_collect, session, task.fn, calls)
        call = functools.partial(self.runtime.run_tagged, tag, pool_of(task), collect)
        rows = await self.runtime.supervise(call, tag, task.name, task.timeout)
        return decode_outcomes(rows, len(calls))


def _collect(session: Any, fn: Callable[..., Any], calls: list[Call]) -> list[Any]:
    """One Spark job over the batch: a partition per core, an outcome per item."""
    sc = session.sparkContext
    rows = [(index, args, kwargs) for index, (args, kwargs) in enumerate(calls)]
    slices = max(1, min(len(rows), sc.defaultParallelism))
    partition = functools.partial(spark_items.run_partition, fn)
    return list(sc.parallelize(rows, slices).mapPartitions(partition).collect())


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
