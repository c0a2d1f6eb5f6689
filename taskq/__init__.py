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
    TaskFailed,
    TaskqError,
    TaskTimeout,
    TransientError,
    ValidationError,
)
from taskq.handle import TaskHandle
from taskq.task import Task
from taskq.workflows import GroupHandle, Signature, chain, chord, group

__version__ = "0.1.0"

__all__ = [
    "App",
    "ArgumentsError",
    "BrokerError",
    "ConfigError",
    "ConnectError",
    "GroupHandle",
    "PayloadTooLarge",
    "PermissionDenied",
    "Reject",
    "Retry",
    "Signature",
    "Task",
    "TaskFailed",
    "TaskHandle",
    "TaskTimeout",
    "TaskqError",
    "TransientError",
    "ValidationError",
    "chain",
    "chord",
    "group",
]
