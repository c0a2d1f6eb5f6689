"""The taskq error tree: every error a user can see derives from `TaskqError`.

NATS client errors never cross the `taskq.nats` boundary; they are translated into the
classes below, which carry the facts a caller needs as attributes.
"""

from __future__ import annotations

import signal
from typing import Any


class TaskqError(Exception):
    """Base of every error taskq raises."""


class ConfigError(TaskqError, ValueError):
    """A declaration or setting is invalid (bad queue name, bad option, ...)."""


class ValidationError(TaskqError, ValueError):
    """Input that does not validate (the base of ArgumentsError)."""


class ArgumentsError(ValidationError):
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


class NonFiniteFloat(TaskqError, ValueError):
    """A value taskq was about to send holds a float JSON has no form for (nan, inf, -inf):
    refused, since the other side would read it back as something else (null: None) or
    not at all. `where` says where it is (`args[0]`, `kwargs['x'][2]`, `result['mean']`):
    `what` the value is, then `path`, the keys and indexes down to the float."""

    def __init__(self, what: str, path: tuple[str | int, ...], value: float) -> None:
        self.what = what
        self.path = path
        self.value = value
        self.where = what + "".join(f"[{step!r}]" for step in path)
        super().__init__(
            f"{self.where} is {value!r}, which JSON has no form for (no NaN, no Infinity): "
            "use a finite number, or None or a string, in its place"
        )

    def __reduce__(self) -> tuple[type[NonFiniteFloat], tuple[str, tuple[str | int, ...], float]]:
        return (NonFiniteFloat, (self.what, self.path, self.value))


class ConnectError(TaskqError):
    """No NATS server answers at `url`, or the TLS handshake with it failed (`tls` is True)."""

    def __init__(self, url: str, detail: str = "") -> None:
        self.url = url
        self.detail = detail
        self.tls = _looks_like_tls(detail)
        if self.tls:
            super().__init__(
                f"TLS with NATS at {url} failed: {detail} "
                "(check --tls-ca, --tls-cert and --tls-key)"
            )
        else:
            super().__init__(f"cannot reach NATS at {url}: start one with `taskq server`")


def _looks_like_tls(detail: str) -> bool:
    lowered = detail.lower()
    return any(word in lowered for word in ("ssl", "tls", "certificate", "handshake"))


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


class NotProvisioned(PermissionDenied):
    """A stream, consumer or bucket taskq needs does not exist, and the connected user may
    not create it (the shipped worker role: an operator provisions with `taskq provision`)."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind, self.name = kind, name
        super().__init__(
            f"{kind} {name} does not exist and this NATS user may not create it: provision "
            "it with an operator's credentials (`taskq provision MODULE:APP`)"
        )


class NotFound(BrokerError):
    """A stream, consumer or message that does not exist."""


class PayloadTooLarge(TaskqError):
    """A message is larger than taskq carries: over the `payload_limit` setting (bodies
    over the server's `max_payload` go through the object store up to it), or over
    `max_payload` where no claim check applies. Nothing was published."""

    def __init__(self, size: int, limit: int, what: str = "message") -> None:
        self.size = size
        self.limit = limit
        self.what = what
        super().__init__(f"{what} is {size} bytes, over the limit of {limit} bytes")

    def __reduce__(self) -> tuple[type[PayloadTooLarge], tuple[int, int, str]]:
        return (PayloadTooLarge, (self.size, self.limit, self.what))


class DecodeError(TaskqError):
    """Bytes received on a queue subject are not a taskq task message."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class UnknownTaskError(TaskqError, LookupError):
    """No task of that name is registered with the app."""

    def __init__(self, name: str, detail: str = "") -> None:
        self.name = name
        self.detail = detail
        super().__init__(f"unknown task {name!r}" + (f": {detail}" if detail else ""))


class TaskTimeout(TaskqError, TimeoutError):
    """A running task exceeded its `timeout`."""

    def __init__(self, task: str, timeout: float) -> None:
        self.task = task
        self.timeout = timeout
        super().__init__(f"task {task!r} exceeded its timeout of {timeout:g}s")


class RunEnded(TaskqError):
    """A signal or cancel sent to a durable run that has ended: nothing would read it."""

    def __init__(self, run_id: str, state: str) -> None:
        self.run_id = run_id
        self.state = state
        super().__init__(f"run {run_id} already {state}")


class WorkflowTimeout(TaskqError, TimeoutError):
    """A durable workflow run did not end within its workflow's `timeout` (counted from
    its start, or from its last retry): the run fails with this."""

    def __init__(self, run_id: str, timeout: float) -> None:
        self.run_id = run_id
        self.timeout = timeout
        super().__init__(f"workflow run {run_id} did not end within its timeout of {timeout:g}s")


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


class SparkUnavailable(TaskqError):
    """Spark tasks cannot run in this process: pyspark or Java is missing, or Spark failed
    to start. `fix` names what to install or change."""

    def __init__(self, problem: str, fix: str) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}: {fix}")


class RemoteItemError(TaskqError):
    """A task failed far from the worker (an item on a Spark executor, a function in a pool
    process) with an error that could not be brought back as itself (unpicklable, or its
    class not importable here)."""

    def __init__(self, type_name: str, message: str) -> None:
        self.type_name = type_name
        self.message = message
        super().__init__(f"{type_name}: {message}")


class ProcessCrashed(TaskqError):
    """The pool process running an `executor="process"` task died before answering (a
    segfault, `os._exit`, an OOM kill). Retried by the task's policy whatever its
    `retry_for`; dead-lettered as `crashed` when the attempts run out."""

    def __init__(self, task: str, pid: int | None, exitcode: int | None) -> None:
        self.task = task
        self.pid = pid
        self.exitcode = exitcode
        super().__init__(f"task {task!r}: its pool process (pid {pid}) {ended(exitcode)}")


def ended(exitcode: int | None) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it):
    `exited with status 1`, `exited with signal SIGKILL`."""
    if exitcode is None:
        return "stopped answering"
    if exitcode >= 0:
        return f"exited with status {exitcode}"
    try:
        return f"exited with signal {signal.Signals(-exitcode).name}"
    except ValueError:
        return f"exited with signal {-exitcode}"


class PoolStartError(TaskqError):
    """A pool process of `executor="process"` tasks could not start: its task module did
    not import, a start hook failed, or it did not answer within `timeout` seconds."""

    def __init__(self, pid: int | None, detail: str) -> None:
        self.pid = pid
        self.detail = detail
        super().__init__(f"pool process (pid {pid}) did not start: {detail}")


class Unpicklable(TaskqError, TypeError):
    """An `executor="process"` task's arguments or result (`what`) cannot cross to or from
    its pool process. Permanent: another attempt would fail the same way."""

    def __init__(self, task: str, what: str, detail: str) -> None:
        self.task = task
        self.what = what
        self.detail = detail
        super().__init__(f"task {task!r}: its {what} cannot be pickled: {detail}")


class TaskCancelled(TaskqError):
    """The task was cancelled (`handle.cancel()`, `taskq cancel`): it will not run, or it
    was stopped while running. Raised by `handle.result()`; inside a worker it is the outcome
    that settles the message as cancelled (acknowledged, not retried, not dead-lettered)."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id} was cancelled")


class TaskFailed(TaskqError):
    """A task ended without a result: dead-lettered (or its workflow failed).

    Carries the remote error: `type`, `message` and `traceback` as recorded by the worker,
    plus `task_id`, `state` and `reason` (the dead-letter reason).
    """

    def __init__(
        self,
        task_id: str,
        state: str,
        type: str,
        message: str,
        traceback: str = "",
        reason: str = "",
    ) -> None:
        self.task_id = task_id
        self.state = state
        self.type = type
        self.message = message
        self.traceback = traceback
        self.reason = reason
        why = f" ({reason})" if reason else ""
        super().__init__(f"task {task_id} {state}{why}: {type}: {message}")


class ResultTimeout(TaskqError, TimeoutError):
    """No final result within the wait's timeout; `state` is the last one seen."""

    def __init__(self, task_id: str, timeout: float, state: str) -> None:
        self.task_id = task_id
        self.timeout = timeout
        self.state = state
        super().__init__(f"task {task_id}: no result within {timeout:g}s (state: {state})")


class NoTaskContext(TaskqError, LookupError):
    """`taskq.current()` was called outside a running task."""

    def __init__(self) -> None:
        super().__init__("taskq.current() is only available inside a running task")


class HookError(TaskqError):
    """A worker lifecycle hook raised: `hook` names it, `error` is what it raised."""

    def __init__(self, stage: str, hook: str, error: BaseException) -> None:
        self.stage = stage
        self.hook = hook
        self.error = error
        super().__init__(f"worker {stage} hook {hook} failed: {type(error).__name__}: {error}")


class UnknownQueue(NotFound):
    """No stream of queue `queue` exists on the server (a typo, another prefix, or a queue
    nothing was ever enqueued to)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        super().__init__(f"no queue {queue!r} on the server")


class TaskDropped(TaskqError):
    """An enqueue was dropped by a `throttle=` window (`reason` says which; `kept` is the id
    of the run that window keeps): raised by `handle.result()` of the dropped call."""

    def __init__(self, task_id: str, reason: str, kept: str = "") -> None:
        self.task_id = task_id
        self.reason = reason
        self.kept = kept
        super().__init__(f"task {task_id} was dropped: {reason}")


class StorageFull(BrokerError):
    """The server refused to store a message because a storage limit is used up: `limit`
    names it (the server's `jetstream max_file_store` or the account's storage, or a
    stream's own `max_bytes`). Not transient: nothing frees space but draining or a
    higher limit, so waiting would only turn a clear error into a hang."""

    def __init__(
        self, limit: str, detail: str, code: int | None = None, status: int | None = None
    ) -> None:
        self.limit = limit
        self.detail = detail
        super().__init__(f"storage full: {limit} is used up ({detail})", code, status)


QueueFull = StorageFull  # the name users look for around `enqueue`


class ConnectionLost(TaskqError):
    """The connection to NATS was closed for good while a worker ran: it stops, and its
    process exits non-zero so a supervisor (`-p N`, systemd, Kubernetes) starts it again."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(f"lost the connection to NATS at {url} for good: worker stopped")


class UnsafeName(TaskqError, ValueError):
    """A subject or header value taskq was about to send that NATS cannot carry as it is
    (white space, a wildcard, a line break, too long): refused before it reaches the
    server, which would close the connection."""

    def __init__(self, what: str, value: str) -> None:
        self.what = what
        self.value = value
        shown = value if len(value) <= 60 else value[:57] + "..."
        super().__init__(f"refusing to send {what} {shown!r}: not valid on the NATS wire")


class OutboxDatabaseError(TaskqError):
    """The outbox's database (`url`, password hidden) cannot be reached or has no outbox
    table (`missing_table`); `detail` is the driver's first line."""

    def __init__(self, url: str, detail: str, missing_table: bool = False) -> None:
        self.url, self.detail, self.missing_table = url, detail, missing_table
        if missing_table:
            super().__init__(
                f"no outbox table in the database at {url}: create it with "
                f"`taskq outbox init --db URL` ({detail})"
            )
        else:
            super().__init__(f"cannot reach the outbox database at {url}: {detail}")
