"""taskq: a task engine for Python built natively on NATS JetStream."""

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from taskq.workflows.canvas import GroupHandle, chain, chord, group
    from taskq.workflows.replay import NonDeterminism
    from taskq.workflows.runs import WorkflowRun
    from taskq.workflows.workflow import Workflow

# Imported on first use (PEP 562): a worker or a script without workflows or canvas never
# loads the workflow engine (`from taskq import chain` works as before).
_LAZY = {
    "GroupHandle": "taskq.workflows.canvas",
    "chain": "taskq.workflows.canvas",
    "chord": "taskq.workflows.canvas",
    "group": "taskq.workflows.canvas",
    "NonDeterminism": "taskq.workflows.replay",
    "WorkflowRun": "taskq.workflows.runs",
    "Workflow": "taskq.workflows.workflow",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taskq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later reads are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


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
