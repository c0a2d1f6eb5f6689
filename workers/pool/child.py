"""Inside a pool process: find the tasks, run the start hooks, then run one call at a time.

A pool process is started by `taskq.workers.pool.processes` with the references of the worker's
`executor="process"` tasks. It imports each task's module (as pickle would find the
function), runs the apps' start hooks once, says it is ready, and then answers each call
sent over its pipe with one reply. Its replies are pickled here, so a result that cannot
be pickled is reported as such instead of breaking the pipe.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import os
import pickle
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from taskq.app import App
from taskq.context import TaskContext, enter, leave
from taskq.records.envelope import Envelope
from taskq.task import Task
from taskq.workers.limits import Limits, rss_mb

log = logging.getLogger("taskq.worker")

STOP = b""  # the message that asks a pool process to stop gracefully


@dataclass(frozen=True)
class TaskRef:
    """Where a pool process finds a task: its registered name, module and qualified name."""

    name: str
    module: str
    qualname: str

    @classmethod
    def of(cls, task: Task[Any, Any]) -> TaskRef:
        return cls(task.name, task.fn.__module__, task.fn.__qualname__)


@dataclass(frozen=True)
class Call:
    """One attempt to run in a pool process (pickled by the worker)."""

    task: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    envelope: Envelope
    queue: str
    attempt: int


def main(
    conn: Connection,
    refs: list[TaskRef],
    log_level: int,
    environ: dict[str, str],
    limits: Limits,
) -> None:
    """The pool process's whole life (the target of `multiprocessing.Process`)."""
    # A forkserver child inherits the environment the fork server started with: take the
    # worker's as it is now, as a spawned process would have it.
    os.environ.clear()
    os.environ.update(environ)
    # Ctrl-C in a terminal reaches the whole process group: the worker decides when its
    # pool stops, so a pool process ignores it and is stopped (or killed) by the worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    loop = asyncio.new_event_loop()
    try:
        tasks = _resolve(refs)
        apps = _apps(tasks)
        for app in apps:
            loop.run_until_complete(app.hooks.run_start(child=True))
    except Exception as exc:
        conn.send_bytes(pickle.dumps(("failed", f"{type(exc).__name__}: {exc}")))
        return
    conn.send_bytes(pickle.dumps(("ready",)))
    _serve(conn, tasks, loop, limits)
    for app in apps:
        loop.run_until_complete(app.hooks.run_stop(child=True))
    loop.close()


def _serve(
    conn: Connection,
    tasks: dict[str, Task[Any, Any]],
    loop: asyncio.AbstractEventLoop,
    limits: Limits,
) -> None:
    done = 0
    while True:
        try:
            blob = conn.recv_bytes()
        except (EOFError, OSError):  # the worker is gone: nothing left to answer
            return
        if blob == STOP:
            return
        answer = _answer(conn, blob, tasks, loop)
        done += 1
        retiring = _due(done, limits)
        if retiring:  # said before the answer, so the worker never sends it another call
            log.info("pool process %d retiring %s", os.getpid(), retiring)
            conn.send_bytes(pickle.dumps(("retiring",)))
        conn.send_bytes(answer)
        if retiring:
            return


def _due(done: int, limits: Limits) -> str:
    """Why this pool process should be replaced now ("" if it should not)."""
    if limits.max_tasks is not None and done >= limits.max_tasks:
        return f"after {done} tasks"
    if limits.max_memory_mb is not None and (memory := rss_mb()) >= limits.max_memory_mb:
        return f"at {memory:.0f} MB"
    return ""


def _answer(
    conn: Connection,
    blob: bytes,
    tasks: dict[str, Task[Any, Any]],
    loop: asyncio.AbstractEventLoop,
) -> bytes:
    try:
        call: Call = pickle.loads(blob)
    except Exception as exc:
        return pickle.dumps(("unpicklable", "arguments", f"{type(exc).__name__}: {exc}"))
    task = tasks[call.task]
    ctx = TaskContext(
        call.envelope,
        call.queue,
        call.attempt,
        task.policy,
        task.timeout,
        time.time(),
        task.middleware_options,
    )
    reports = ctx.reporter = _Reports(conn)
    token = enter(ctx)
    try:
        value = task.fn(*call.args, **call.kwargs)
        if inspect.isawaitable(value):
            value = loop.run_until_complete(value)
    except BaseException as exc:  # every failure, even SystemExit, is the task's to report
        return _error_reply(exc)
    finally:
        leave(token)
        reports.flush()
    try:
        return pickle.dumps(("ok", value))
    except Exception as exc:
        return pickle.dumps(("unpicklable", "result", f"{type(exc).__name__}: {exc}"))


class _Reports:
    """`progress()` in a pool process: sent to the worker over the pipe, at most ten a
    second (the worker's writer limits again); the last one is sent before the answer."""

    INTERVAL = 0.1

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._sent = 0.0
        self._held: tuple[Any, str | None] | None = None

    def __call__(self, ctx: TaskContext, value: Any, message: str | None) -> None:
        self._held = (value, message)
        if time.monotonic() - self._sent >= self.INTERVAL:
            self.flush()

    def flush(self) -> None:
        if self._held is not None:
            value, message = self._held
            self._held = None
            self._sent = time.monotonic()
            self._conn.send_bytes(pickle.dumps(("progress", value, message)))


def _error_reply(exc: BaseException) -> bytes:
    trace = traceback.format_exc()
    blob: bytes | None = None
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)  # an exception may pickle yet not unpickle (custom __init__)
    except Exception:
        blob = None
    return pickle.dumps(("error", blob, type(exc).__name__, str(exc), trace))


def _resolve(refs: list[TaskRef]) -> dict[str, Task[Any, Any]]:
    """Each task, found by importing its module: the decorated name is the Task itself, or
    (for `app.task(fn)` left unbound) an App of the module has it registered."""
    tasks: dict[str, Task[Any, Any]] = {}
    for ref in refs:
        module = importlib.import_module(ref.module)
        found: Any = module
        for part in ref.qualname.split("."):
            found = getattr(found, part, None)
        if not isinstance(found, Task) or found.name != ref.name:
            found = next(
                (
                    a.tasks[ref.name]
                    for a in vars(module).values()
                    if isinstance(a, App) and ref.name in a.tasks
                ),
                None,
            )
        if found is None:
            raise LookupError(f"task {ref.name!r} not found in module {ref.module!r}")
        tasks[ref.name] = found
    return tasks


def _apps(tasks: dict[str, Task[Any, Any]]) -> list[App]:
    apps: list[App] = []
    for task in tasks.values():
        if isinstance(task.app, App) and not any(task.app is a for a in apps):
            apps.append(task.app)
    return apps
