"""The taskq consumer runtime: `Worker` and its executors."""

from taskq.workers.worker import Worker

__all__ = ["Worker"]
