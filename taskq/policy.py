"""Retry policy and `decide()`: the one place that turns an attempt's outcome into a verdict.

`decide` is pure: the same policy, attempt number and outcome always give the same kind of
decision (only the jitter inside a retry delay is random). The server's delivery count is
the attempt number, so retries need no bookkeeping of our own (docs/concepts.md, the promises).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal

from taskq.errors import (
    ArgumentsError,
    NonFiniteFloat,
    ProcessCrashed,
    Reject,
    Retry,
    SparkUnavailable,
    TaskCancelled,
    Unpicklable,
)

DeadReason = Literal[
    "exhausted",
    "permanent",
    "undecodable",
    "unknown_task",
    "expired",
    "crashed",
    "forged_step",
    "unstored",
    "unpublishable",  # an outbox row the relay can never publish (taskq.outbox)
]


# a task's lease (the server's ack_wait) when it names none: in-progress acks extend it
# every third of it while the task runs, so it only bounds how soon a crash is noticed
DEFAULT_ACK_WAIT = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts a task gets and how long to wait between them."""

    max_retries: int = 3
    backoff: float = 1.0  # first delay, seconds
    backoff_max: float = 300.0  # cap on any delay
    jitter: float = 1.0  # up to this many seconds added at random
    retry_for: tuple[type[BaseException], ...] = (Exception,)
    give_up_on: tuple[type[BaseException], ...] = ()

    @property
    def attempts(self) -> int:
        return self.max_retries + 1

    def delay(self, attempt: int) -> float:
        """Delay before the attempt after `attempt`: exponential from `backoff`, plus up to
        `jitter` seconds at random, capped at `backoff_max` (the NAK delay of a retry)."""
        exponent = min(max(attempt, 1) - 1, 64)  # 2**64 s is past any cap: no overflow
        raw = self.backoff * 2.0**exponent + random.uniform(0, self.jitter)
        return max(0.0, min(raw, self.backoff_max))


@dataclass(frozen=True)
class Success:
    value: Any = None


@dataclass(frozen=True)
class Failure:
    error: BaseException
    traceback: str = ""


Outcome = Success | Failure


@dataclass(frozen=True)
class Ack:
    """Done: remove the message."""


@dataclass(frozen=True)
class Nak:
    """Try again after `delay` seconds (server-side redelivery)."""

    delay: float


@dataclass(frozen=True)
class Dead:
    """No more attempts: write a dead letter, then terminate the message."""

    reason: DeadReason
    detail: str = field(default="")


@dataclass(frozen=True)
class Cancel:
    """Not run: cancelled on request, or `dropped` by a throttle window (its producer said
    so); record it, then remove the message (no retry, no dead letter)."""

    state: str = "cancelled"  # or "dropped"
    reason: str = "cancelled"
    kept: str = ""  # a dropped call: the id of the run its window kept


@dataclass(frozen=True)
class Hold:
    """Held back by a flow-control limit, or until its `eta` (never from `decide`): the
    message is stored again as a schedule due at `until` (epoch seconds) on its limit's
    `group` ("": a delayed task's own schedule), carrying its spent attempts, and then
    acknowledged: no attempt is spent, nothing counts toward MaxDeliver
    (taskq.flowcontrol.held). `done`: an earlier delivery already stored it; only ack."""

    limit: str  # which limit, for people
    group: str = ""
    until: float = 0.0
    target: str = ""  # where the held copy goes ("": where the delivery came from)
    ticket: str = ""  # a rate-limit window reserved for it
    done: bool = False
    since: float = 0.0  # a task no worker here knows: when one first could not run it
    # a retry's backoff held (a time-skipping test): the attempt that failed is spent
    retry: bool = False


Decision = Ack | Nak | Dead | Cancel | Hold


def decide(policy: RetryPolicy, attempt: int, outcome: Outcome) -> Decision:
    """Verdict for attempt number `attempt` (1-based, the server's delivery count)."""
    if isinstance(outcome, Success):
        return Ack()
    error = outcome.error
    steered = _steered(policy, attempt, error)
    if steered is not None:
        return steered
    if policy.give_up_on and isinstance(error, policy.give_up_on):
        return Dead("permanent", f"{type(error).__name__} is in give_up_on")
    if not isinstance(error, policy.retry_for):
        return Dead("permanent", f"{type(error).__name__} is not in retry_for")
    if attempt >= policy.attempts:
        return Dead("exhausted", f"failed all {policy.attempts} attempts")
    return Nak(policy.delay(attempt))


def _steered(policy: RetryPolicy, attempt: int, error: BaseException) -> Decision | None:
    """The verdict for errors that decide for themselves, whatever the exception filters:
    a cancel, a permanent failure, a crashed pool process, an explicit Retry."""
    if isinstance(error, TaskCancelled):
        return Cancel()
    if isinstance(error, Reject | ArgumentsError | Unpicklable | NonFiniteFloat):
        return Dead("permanent", str(error))
    last = attempt >= policy.attempts
    if isinstance(error, ProcessCrashed | SparkUnavailable):
        # like a worker dying (its process, its Spark cluster): retried whatever retry_for
        if last:
            reason: DeadReason = "crashed" if isinstance(error, ProcessCrashed) else "exhausted"
            return Dead(reason, f"{error}, on the last of {policy.attempts} attempt(s)")
        return Nak(policy.delay(attempt))
    if isinstance(error, Retry):
        if last:
            return Dead(
                "exhausted", f"retry requested after the last of {policy.attempts} attempts"
            )
        delay = error.delay if error.delay is not None else policy.delay(attempt)
        return Nak(max(0.0, delay))
    return None
