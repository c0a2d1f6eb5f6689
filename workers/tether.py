"""What ties a worker process to its supervisor (`taskq worker -p N`), on the worker's side.

The supervisor starts each worker process with these environment variables:

- `TASKQ_WORKER_PROCESS`: its index, 1..N; `taskq worker` then runs one plain worker;
- `TASKQ_SUPERVISOR_PID`: the supervisor, watched so an orphan stops instead of living on;
- `TASKQ_READY_FD`: a pipe to write one byte to once the worker is ready, so the supervisor
  knows a start-up failure (exit before ready) from a failure later on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from taskq.workers.worker import Worker

log = logging.getLogger("taskq.worker")

WORKER_PROCESS = "TASKQ_WORKER_PROCESS"
SUPERVISOR_PID = "TASKQ_SUPERVISOR_PID"
READY_FD = "TASKQ_READY_FD"
ORPHAN_CHECK_EVERY = 1.0  # seconds


def supervised() -> bool:
    """True in a worker process started by a supervisor."""
    return bool(os.environ.get(WORKER_PROCESS))


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def tethers(worker: Worker) -> list[asyncio.Task[None]]:
    """Start the ready notice and the orphan watch for `worker`, when a supervisor asked."""
    jobs = []
    ready_fd = _env_int(READY_FD)
    if ready_fd is not None:
        # not inherited by the processes this one starts (the executor="process" pool), so
        # the pipe closes when this process ends and the supervisor stops watching it
        with contextlib.suppress(OSError):
            os.set_inheritable(ready_fd, False)
        jobs.append(asyncio.create_task(_notify_ready(worker, ready_fd)))
    parent = _env_int(SUPERVISOR_PID)
    if parent is not None:
        jobs.append(asyncio.create_task(_stop_when_orphaned(worker, parent)))
    return jobs


async def _notify_ready(worker: Worker, fd: int) -> None:
    """Tell the supervisor this worker is ready (one byte on its pipe), then close it."""
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                await worker.wait_ready(timeout=3600.0)
                break
        with contextlib.suppress(OSError):  # the supervisor may be gone: the watch stops us
            os.write(fd, b"R")
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


async def _stop_when_orphaned(worker: Worker, supervisor: int) -> None:
    """Stop `worker` gracefully once its supervisor is gone (killed with SIGKILL, say):
    the process was re-parented, and nobody would stop or restart it any more."""
    while not worker.stopping:
        if os.getppid() != supervisor:
            log.warning("supervisor (pid %d) is gone: stopping this worker process", supervisor)
            worker.stop()
            return
        await asyncio.sleep(ORPHAN_CHECK_EVERY)
