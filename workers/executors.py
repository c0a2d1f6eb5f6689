"""Where attempts run besides the event loop: the worker's threads (`def` tasks), and, wired
only for a worker that consumes a task running there, the Spark backend and the process
pool. A plain worker never imports them (pyspark's glue, multiprocessing)."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskq.settings import Settings
from taskq.task import Task
from taskq.workers.threads import TaskThreads

if TYPE_CHECKING:
    from taskq.workers.limits import Limits
    from taskq.workers.pool.processes import ProcessPool
    from taskq.workers.slots import LendSlot
    from taskq.workers.spark.jobs import SparkExecutor
    from taskq.workers.spark.session import SparkRuntime


@dataclass
class Runners:
    """The executors of one worker: threads always, Spark and a process pool when needed."""

    threads: Executor
    lend: LendSlot
    spark: SparkExecutor | None = None
    pool: ProcessPool | None = None

    async def start(self) -> None:
        """Start the process pool's children (if any)."""
        if self.pool is not None:
            await self.pool.start()

    async def close(self) -> None:
        """Stop the pool's children and what Spark still runs (a session this worker made)."""
        if self.pool is not None:
            await self.pool.close()
        if self.spark is not None:
            await self.spark.close()

    def abandon_threads(self) -> None:
        """Let go of the threads (a stuck `def` task's thread is a daemon: never joined)."""
        self.threads.shutdown(wait=False, cancel_futures=True)


def runners_for(
    settings: Settings,
    tasks: list[Task[Any, Any]],
    concurrency: int,
    lend: LendSlot,
    spark: SparkRuntime | None = None,
    pool_size: int | None = None,
    limits: Limits | None = None,
) -> Runners:
    """The executors `tasks` need: `concurrency` threads for `def` tasks, Spark for
    `executor="spark"` tasks (on `spark`, a runtime shared across workers, if given), a
    pool of `pool_size` processes (None: the CPU count, recycled by `limits`) for
    `executor="process"` tasks."""
    runners = Runners(TaskThreads(concurrency), lend)  # renewed past hung `def` tasks
    if spark is not None or any(t.executor == "spark" for t in tasks):
        from taskq.workers.spark.jobs import SparkExecutor

        runners.spark = SparkExecutor(settings, tasks, spark)
    in_processes = [t for t in tasks if t.executor == "process"]
    if in_processes:
        from taskq.workers.pool.processes import ProcessPool

        runners.pool = ProcessPool(in_processes, pool_size, limits)
    return runners
