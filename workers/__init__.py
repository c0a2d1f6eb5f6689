"""The taskq consumer runtime: `Worker` and its executors."""

from workers.worker import Worker

__all__ = ["Worker"]
