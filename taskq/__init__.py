"""taskq: a task engine for Python built natively on NATS JetStream."""

from taskq.app import App
from taskq.errors import (
    ArgumentsError,
    BrokerError,
    ConfigError,
    ConnectError,
    PayloadTooLarge,
    PermissionDenied,
    Reject,
    Retry,
    TaskqError,
    TaskTimeout,
    TransientError,
)
from taskq.handle import TaskHandle
from taskq.task import Task

__version__ = "0.1.0"

__all__ = [
    "App",
    "ArgumentsError",
    "BrokerError",
    "ConfigError",
    "ConnectError",
    "PayloadTooLarge",
    "PermissionDenied",
    "Reject",
    "Retry",
    "Task",
    "TaskHandle",
    "TaskTimeout",
    "TaskqError",
    "TransientError",
]
