"""Recycling limits (`--max-tasks-per-child`, `--max-memory-per-child`) and reading a
process's memory: shared by worker processes (`taskq.workers.recycle`) and pool processes
(`taskq.workers.pool.child`), which each apply them to themselves."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """When to recycle: after `max_tasks` settled tasks, or at `max_memory_mb` of RSS."""

    max_tasks: int | None = None
    max_memory_mb: float | None = None

    def __bool__(self) -> bool:
        return self.max_tasks is not None or self.max_memory_mb is not None


def rss_mb() -> float:
    """This process's resident memory in MB (on Linux, now; elsewhere, its peak so far)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource  # not on Windows, which has no supervisor signals anyway

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is in KiB on Linux and the BSDs, in bytes on macOS
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10
