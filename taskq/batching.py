"""Batch options of a Spark batch task: how many messages one Spark job takes at most, and
how long the worker waits for a batch to fill before running what it has."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.errors import ConfigError


@dataclass(frozen=True)
class Batching:
    """`batch_size` messages at most per Spark job, gathered for at most `max_wait` seconds."""

    batch_size: int = 1000
    max_wait: float = 2.0

    def check(self, task: str) -> Batching:
        """Validate for task `task` (named in the error); returns self."""
        if self.batch_size < 1:
            raise ConfigError(f"task {task!r}: batch_size must be >= 1")
        if self.max_wait < 0:
            raise ConfigError(f"task {task!r}: max_wait must be >= 0")
        return self
