"""Recycling a worker process: stop it gracefully after N tasks or above a memory limit.

`taskq worker --max-tasks-per-child N / --max-memory-per-child MB` run each worker process
under the supervisor (`taskq.workers.supervise`), which starts a fresh process the moment a
recycled one exits 0. The stop is `Worker.stop()`, the same as a SIGTERM: fetching stops,
running tasks (and any fetched while stopping) finish and are settled, so a recycle loses no
task and runs none twice.
"""

from __future__ import annotations

import asyncio
import logging

from taskq.workers.limits import Limits, rss_mb
from taskq.workers.worker import Worker

log = logging.getLogger("taskq.worker")

# Worker.stats keys: one per settled delivery
SETTLED = ("succeeded", "retried", "dead", "cancelled")
# seconds: a fast task settles thousands a second, so the count is looked at often enough
# for a recycle to come soon after N; each look (and reading /proc/self/statm) costs microseconds
CHECK_EVERY = 0.05


def settled(worker: Worker) -> int:
    """Deliveries `worker` has settled (acked, NAKed for a retry or dead-lettered)."""
    return sum(worker.stats[key] for key in SETTLED)


def due(worker: Worker, limits: Limits) -> str | None:
    """Why `worker` should be recycled now, or None."""
    done = settled(worker)
    # or all it may fetch has ended (some ways of ending, a hand-back, are no settle)
    if limits.max_tasks is not None and (done >= limits.max_tasks or worker.fetched_all):
        return f"after {done} tasks"
    # Only once a task has settled: a process whose baseline alone is over the limit would
    # otherwise be recycled before doing any work, over and over.
    if limits.max_memory_mb is not None and done > 0:
        memory = rss_mb()
        if memory >= limits.max_memory_mb:
            return f"at {memory:.0f} MB (after {done} tasks)"
    return None


async def recycle_when_due(worker: Worker, limits: Limits) -> None:
    """Watch `worker` and stop it gracefully once `limits` are reached; then return."""
    while not worker.stopping:
        reason = due(worker, limits)
        if reason is not None:
            log.info("recycling worker process %s", reason)
            worker.stop()
            return
        await asyncio.sleep(CHECK_EVERY)
