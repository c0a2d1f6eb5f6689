"""The threads plain `def` tasks run in: a pool of `concurrency` threads that is renewed
when an attempt's thread has to be abandoned.

A thread cannot be stopped from outside. When a `def` task overruns its `timeout` the
attempt fails (TaskTimeout) and its slot is freed, but its thread goes on running the
function, possibly forever (a `time.sleep(10**6)`, a call stuck in C code). Left in the
pool, each such thread would take one thread from every later task until none was left:
the worker would accept `concurrency` tasks and run fewer, and their own timeouts would
expire while they waited for a thread. So the pool is replaced by a fresh one; the old pool
is shut down without waiting, its healthy threads finish what they run and exit, and the
stuck thread ends whenever its function returns (or with the process). Code that may hang
belongs in `executor="process"`, whose child is killed at the timeout.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

log = logging.getLogger("taskq.worker")

P = ParamSpec("P")
T = TypeVar("T")


class TaskThreads(Executor):
    """A thread pool whose capacity survives abandoned threads (`abandon`)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.abandoned = 0  # threads left running a timed-out attempt, over the worker's life
        self._lock = threading.Lock()
        self._pool = self._fresh()

    def _fresh(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(self.size, thread_name_prefix="taskq-task")

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        with self._lock:
            return self._pool.submit(fn, *args, **kwargs)

    def abandon(self, task: str) -> None:
        """An attempt of `task` timed out in its thread: later tasks get a new pool."""
        with self._lock:
            old, self._pool = self._pool, self._fresh()
            self.abandoned += 1
        old.shutdown(wait=False)  # what it runs or has queued still runs
        log.warning(
            "task %s timed out in its thread, which cannot be stopped and is left running "
            "(%d so far); the worker's threads are renewed. Code that may hang belongs in "
            'executor="process"',
            task,
            self.abandoned,
        )

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
