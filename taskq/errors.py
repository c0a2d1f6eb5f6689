"""The taskq error tree: every error a user can see derives from `TaskqError`.

NATS client errors never cross the `taskq.jetstream` boundary; they are translated into the
classes below, which carry the facts a caller needs as attributes.
"""

from __future__ import annotations

from typing import Any


class TaskqError(Exception):
    """Base of every error taskq raises."""


class ConfigError(TaskqError, ValueError):
    """A declaration or setting is invalid (bad queue name, bad option, ...)."""


class ArgumentsError(TaskqError, ValueError):
    """Task arguments do not match the task's signature.

    Raised at enqueue time (nothing is published) and, in the worker, turned into a
    `permanent` dead letter.
    """

    def __init__(self, task: str, errors: list[dict[str, Any]] | str) -> None:
        self.task = task
        self.errors = errors
        detail = errors if isinstance(errors, str) else "; ".join(_format(e) for e in errors)
        super().__init__(f"invalid arguments for task {task!r}: {detail}")


def _format(error: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in error.get("loc", ()))
    return f"{loc}: {error.get('msg', '?')}" if loc else str(error.get("msg", "?"))


class ConnectError(TaskqError):
    """No NATS server answers at `url`."""

    def __init__(self, url: str, detail: str = "") -> None:
        self.url = url
        self.detail = detail
        super().__init__(f"cannot reach NATS at {url}: start one with `taskq server`")


class BrokerError(TaskqError):
    """The NATS server refused a request (`code` is the JetStream error code, if any)."""

    def __init__(self, message: str, code: int | None = None, status: int | None = None) -> None:
        self.code = code
        self.status = status
        super().__init__(message)


class TransientError(BrokerError):
    """A failure expected to pass: no responders during an election, a timeout, a reconnect."""


class PermissionDenied(BrokerError):
    """The connected user is not allowed to publish or subscribe on a subject."""


class NotFound(BrokerError):
    """A stream, consumer or message that does not exist."""


class PayloadTooLarge(TaskqError):
    """An encoded task exceeds the server's `max_payload`; nothing was published."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"task message is {size} bytes, over the server's max_payload of {limit}")


class DecodeError(TaskqError):
    """Bytes received on a queue subject are not a taskq task message."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class UnknownTaskError(TaskqError, LookupError):
    """No task of that name is registered with the app."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown task {name!r}")


class TaskTimeout(TaskqError, TimeoutError):
    """A running task exceeded its `timeout`."""

    def __init__(self, task: str, timeout: float) -> None:
        self.task = task
        self.timeout = timeout
        super().__init__(f"task {task!r} exceeded its timeout of {timeout:g}s")


class Retry(TaskqError):
    """Raised by task code to ask for another attempt, optionally after `delay` seconds."""

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        self.delay = delay
        self.reason = reason
        super().__init__(reason or (f"retry requested in {delay:g}s" if delay else "retry"))


class Reject(TaskqError):
    """Raised by task code to fail permanently: no more attempts, straight to the DLQ."""

    def __init__(self, reason: str = "rejected") -> None:
        self.reason = reason
        super().__init__(reason)
