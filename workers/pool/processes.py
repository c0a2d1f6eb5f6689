"""The process pool of `executor="process"` tasks: child processes of the worker, one call
at a time each, that can be killed one by one.

`concurrent.futures.ProcessPoolExecutor` cannot kill one call (a timeout, a cancel) and
breaks as a whole when one child dies, failing every call in flight; this pool gives each
child its own pipe and watches its exit, so a timeout or a crash fails one attempt and the
child is replaced. Children start with `forkserver` (where the platform has it, else
`spawn`): forking the worker itself would copy its event loop, threads and NATS connection.
The worker validates arguments; they travel pickled, and so do results and errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import pickle
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from taskq.context import TaskContext
from taskq.errors import (
    PoolStartError,
    ProcessCrashed,
    RemoteItemError,
    TaskTimeout,
    Unpicklable,
)
from taskq.task import Task
from taskq.workers.execute import REMOTE_TRACE
from taskq.workers.limits import Limits
from taskq.workers.pool.child import STOP, Call, TaskRef, main

log = logging.getLogger("taskq.worker")

START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
TERM_GRACE = 1.0  # seconds a child gets between SIGTERM and SIGKILL on a timeout
STOP_GRACE = 5.0  # seconds an idle child gets to run its stop hooks on shutdown
START_TIMEOUT = 60.0  # seconds a new child gets to import the tasks and run its start hooks
# what usually keeps a child from answering: it re-imports the main module, which runs a worker
_HANGS = "a script that runs a worker must do so under `if __name__ == '__main__':`"


class Child:
    """One pool process, its pipe, and the reply it owes (if any)."""

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.pid = process.pid  # kept: a closed process object no longer says
        self.conn = conn
        self.exited = asyncio.Event()
        self._replies: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._reading = True
        self.retiring = False  # it said it exits after its answer (a recycling limit)
        loop = asyncio.get_running_loop()
        loop.add_reader(conn.fileno(), self._on_readable)
        loop.add_reader(process.sentinel, self._on_exit)

    async def reply(self) -> tuple[Any, ...]:
        """The child's next message; ("exited",) once it is gone."""
        return await self._replies.get()

    def send(self, blob: bytes) -> None:
        self.conn.send_bytes(blob)

    def _on_readable(self) -> None:
        try:
            while self.conn.poll():
                self._replies.put_nowait(pickle.loads(self.conn.recv_bytes()))
        except (EOFError, OSError):
            self._stop_reading()  # its exit is seen on the sentinel, with its status
        except Exception as exc:  # an answer that cannot be read back is the call's failure
            self._replies.put_nowait(("unreadable", f"{type(exc).__name__}: {exc}"))

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            asyncio.get_running_loop().remove_reader(self.conn.fileno())

    def _on_exit(self) -> None:
        if self.exited.is_set():
            return
        if self._reading:
            with contextlib.suppress(EOFError, OSError):
                while self.conn.poll():  # an answer sent just before exiting still counts
                    self._replies.put_nowait(pickle.loads(self.conn.recv_bytes()))
            self._stop_reading()
        asyncio.get_running_loop().remove_reader(self.process.sentinel)
        self.process.join(0)
        self.exited.set()
        self._replies.put_nowait(("exited",))

    async def kill(self, grace: float = 0.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; returns once the child is gone."""
        if grace > 0 and not self.exited.is_set():
            self.process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), grace)
        if not self.exited.is_set():
            self.process.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.exited.wait(), 5.0)

    def close(self) -> None:
        if not self.exited.is_set():
            self._on_exit()
        self.conn.close()
        with contextlib.suppress(ValueError):  # still running after a failed kill: leave it
            self.process.close()


class ProcessPool:
    """`size` pool processes for `tasks`; `run` sends one attempt to an idle one."""

    def __init__(
        self, tasks: list[Task[Any, Any]], size: int | None = None, limits: Limits | None = None
    ) -> None:
        self.size = size or os.cpu_count() or 1
        self._limits = limits or Limits()
        self._refs = [TaskRef.of(t) for t in tasks]
        self._mp: Any = multiprocessing.get_context(START_METHOD)  # typeshed lacks .Process
        self._idle: list[Child] = []
        self._free = asyncio.Semaphore(self.size)
        self._children: set[Child] = set()
        self._closing = False

    async def start(self) -> None:
        """Start every child and wait until each ran its start hooks (HookError if not)."""
        children = await asyncio.gather(
            *(self._spawn() for _ in range(self.size)), return_exceptions=True
        )
        ready = [c for c in children if isinstance(c, Child)]
        self._idle.extend(ready)
        failed = next((c for c in children if isinstance(c, BaseException)), None)
        if failed is not None:
            await self.close()
            raise failed
        log.info("process pool ready: %d processes (%s)", self.size, START_METHOD)

    async def run(
        self, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], ctx: TaskContext
    ) -> Any:
        """Run one attempt in a child: its value, or its error raised here."""
        blob = _pickled(task, Call(task.name, args, kwargs, ctx.envelope, ctx.queue, ctx.attempt))
        async with self._free:
            child = await self._acquire()
            healthy = False
            try:
                reply = await self._call(child, task, blob, ctx)
                healthy = True
            finally:
                if healthy and not child.retiring:
                    self._idle.append(child)
                elif healthy:  # it reached a recycling limit and exits by itself
                    await self._retire(child)
                else:  # killed, crashed or cancelled: never reuse it
                    await self._discard(child)
        return _value(task, child, reply)

    async def _acquire(self) -> Child:
        """An idle child (one that died while idle is replaced), or a new one (lazily
        replacing a child that was killed or crashed)."""
        while self._idle:
            child = self._idle.pop()
            if not child.exited.is_set():
                return child
            await self._discard(child)
        return await self._spawn()

    async def _call(
        self, child: Child, task: Task[Any, Any], blob: bytes, ctx: TaskContext
    ) -> tuple[Any, ...]:
        try:
            child.send(blob)
        except OSError:  # it died between calls: the attempt never started
            raise ProcessCrashed(task.name, child.pid, child.process.exitcode) from None
        try:
            async with asyncio.timeout(task.timeout):
                reply = await child.reply()
                while reply[0] in ("progress", "retiring"):  # said before the answer
                    if reply[0] == "retiring":
                        child.retiring = True
                    elif ctx.reporter is not None:
                        ctx.reporter(ctx, reply[1], reply[2])
                    reply = await child.reply()
        except TimeoutError:
            log.warning(
                "%s: timed out after %ss, killing pool process %s",
                task.name,
                task.timeout,
                child.pid,
            )
            await child.kill(TERM_GRACE)
            raise TaskTimeout(task.name, task.timeout or 0.0) from None
        if reply[0] == "exited":
            raise ProcessCrashed(task.name, child.pid, child.process.exitcode)
        return reply

    async def _spawn(self) -> Child:
        parent_end, child_end = self._mp.Pipe()
        process = self._mp.Process(
            target=main,
            args=(
                child_end,
                self._refs,
                logging.getLogger("taskq").getEffectiveLevel(),
                dict(os.environ),
                self._limits,
            ),
            name="taskq-pool",
            daemon=True,
        )
        process.start()
        child_end.close()  # only the child holds its end: its exit reads as EOF here
        child = Child(process, parent_end)
        self._children.add(child)
        try:
            first = await asyncio.wait_for(child.reply(), START_TIMEOUT)
        except TimeoutError:
            first = ("silent", f"no answer within {START_TIMEOUT:.0f}s ({_HANGS})")
        if first[0] != "ready":
            await self._discard(child)
            detail = first[1] if len(first) > 1 else "it exited before it was ready"
            raise PoolStartError(child.pid, detail)
        return child

    async def _retire(self, child: Child) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(child.exited.wait(), STOP_GRACE)
        await self._discard(child)

    async def _discard(self, child: Child) -> None:
        await child.kill()
        child.close()
        self._children.discard(child)

    async def close(self) -> None:
        """Stop idle children gracefully (their stop hooks run); kill any still running."""
        self._closing = True
        for child in self._idle:
            with contextlib.suppress(OSError):
                child.send(STOP)
        idle, self._idle = self._idle, []
        for child in idle:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(child.exited.wait(), STOP_GRACE)
        for child in list(self._children):
            await child.kill()
            child.close()
        self._children.clear()


def _pickled(task: Task[Any, Any], call: Call) -> bytes:
    try:
        return pickle.dumps(call)
    except Exception as exc:
        raise Unpicklable(task.name, "arguments", f"{type(exc).__name__}: {exc}") from None


def _value(task: Task[Any, Any], child: Child, reply: tuple[Any, ...]) -> Any:
    kind = reply[0]
    if kind == "ok":
        return reply[1]
    if kind == "unpicklable":
        raise Unpicklable(task.name, reply[1], reply[2])
    if kind == "error":
        _, blob, type_name, message, trace = reply
        error = pickle.loads(blob) if blob is not None else RemoteItemError(type_name, message)
        with contextlib.suppress(AttributeError):  # no attribute on a __slots__ exception
            setattr(error, REMOTE_TRACE, trace)  # where it was raised, in the child
        raise error
    if kind == "unreadable":
        raise Unpicklable(task.name, "result", reply[1])
    raise RemoteItemError("PoolError", f"pool process {child.pid} answered {reply!r}")
