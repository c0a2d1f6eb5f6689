"""taskq: a task engine for Python built natively on NATS JetStream."""

from taskq.app import App
from taskq.client import Client
from taskq.context import TaskContext, current
from taskq.errors import (
    ArgumentsError,
    BrokerError,
    ConfigError,
    ConnectError,
    HookError,
    NonFiniteFloat,
    NoTaskContext,
    PayloadTooLarge,
    PermissionDenied,
    ProcessCrashed,
    QueueFull,
    Reject,
    Retry,
    StorageFull,
    TaskCancelled,
    TaskDropped,
    TaskFailed,
    TaskqError,
    TaskTimeout,
    TransientError,
    Unpicklable,
    ValidationError,
)
from taskq.handle import TaskHandle
from taskq.middleware import Middleware, Settled
from taskq.task import Signature, Task
from taskq.timings import Timings
from taskq.workflows.canvas import GroupHandle, chain, chord, group
from taskq.workflows.replay import NonDeterminism
from taskq.workflows.runs import WorkflowRun
from taskq.workflows.workflow import Workflow

__version__ = "0.1.0"

__all__ = [
    "App",
    "ArgumentsError",
    "BrokerError",
    "Client",
    "ConfigError",
    "ConnectError",
    "GroupHandle",
    "HookError",
    "Middleware",
    "NoTaskContext",
    "NonDeterminism",
    "NonFiniteFloat",
    "PayloadTooLarge",
    "PermissionDenied",
    "ProcessCrashed",
    "QueueFull",
    "Reject",
    "Retry",
    "Settled",
    "Signature",
    "StorageFull",
    "Task",
    "TaskCancelled",
    "TaskContext",
    "TaskDropped",
    "TaskFailed",
    "TaskHandle",
    "TaskTimeout",
    "TaskqError",
    "Timings",
    "TransientError",
    "Unpicklable",
    "ValidationError",
    "Workflow",
    "WorkflowRun",
    "chain",
    "chord",
    "current",
    "group",
]
