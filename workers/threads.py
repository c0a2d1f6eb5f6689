"""The threads plain `def` tasks run in: `concurrency` threads, whose count survives threads
abandoned to a task that never returns.

A thread cannot be stopped from outside. When a `def` task overruns its `timeout` the attempt
fails (TaskTimeout) and its slot is freed, but its thread goes on running the function,
possibly forever (a `time.sleep(10**6)`, a call stuck in C code). Counted in the pool, each
such thread would take one thread from every later task until none was left: the worker
would accept `concurrency` tasks and run fewer, and their own timeouts would expire while they
waited for a thread. So an abandoned thread stops counting and a new one may start; if the
stuck function ever returns, its thread ends there.

The threads are daemon threads, unlike `ThreadPoolExecutor`'s, which the interpreter joins
at exit: one stuck thread would keep a stopped worker process from ever exiting. Code that may
hang belongs in `executor="process"`, whose child is killed at the timeout.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("taskq.worker")

P = ParamSpec("P")
T = TypeVar("T")
Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class TaskThreads(Executor):
    """A pool of `size` daemon threads; `abandon` gives one up to a stuck call."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.abandoned = 0  # threads given up to timed-out attempts, over the worker's life
        self._work: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # a thread waiting for work
        self._lock = threading.Lock()
        self._alive = 0  # threads running, abandoned ones included
        self._counted = 0  # threads counted against `size` (abandoned ones are not)
        self._given_up: set[Future[Any]] = set()  # calls whose thread was abandoned
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._work.put((future, fn, args, kwargs))
            # as ThreadPoolExecutor does: reuse an idle thread, else start one up to `size`
            if not self._idle.acquire(blocking=False) and self._counted < self.size:
                self._counted += 1
                self._alive += 1
                threading.Thread(target=self._serve, name="taskq-task", daemon=True).start()
        return future

    def abandon(self, future: Future[Any], task: str) -> None:
        """`future`'s call (an attempt of `task`) timed out: stop counting its thread."""
        if future.cancel():
            return  # it never started: no thread to give up
        with self._lock:
            if future.done():
                return
            self._given_up.add(future)
            self._counted -= 1
            self.abandoned += 1
        log.warning(
            "task %s timed out in its thread, which cannot be stopped and is left running "
            "(%d so far); another thread takes its place. Code that may hang belongs in "
            'executor="process"',
            task,
            self.abandoned,
        )

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; threads end when the queue is done (`wait` is not honoured: a
        stuck thread would never be joined)."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                _cancel_queued(self._work)
            for _ in range(self._alive):
                self._work.put(None)  # one stop mark per thread

    def _serve(self) -> None:
        while (work := self._work.get()) is not None:
            _run(*work)
            with self._lock:
                if work[0] in self._given_up:  # replaced while stuck: not needed any more
                    self._given_up.discard(work[0])
                    self._alive -= 1
                    return
            self._idle.release()


def _run(
    future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # handed to the waiter, as ThreadPoolExecutor does
        future.set_exception(exc)
    else:
        future.set_result(result)


def _cancel_queued(work: queue.SimpleQueue[Work | None]) -> None:
    while True:
        try:
            item = work.get_nowait()
        except queue.Empty:
            return
        if item is not None:
            item[0].cancel()
