"""What a task declares about flow control, validated at declaration (ConfigError).

`@app.task(max_concurrency=N, concurrency_key=..., max_per_key=N, rate_limit="50/s",
rate_limit_key=..., priority=N)`. A key is an argument name or a function of the task's
arguments; the worker evaluates it on the validated call.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from taskq.errors import ConfigError
from taskq.policy import DEFAULT_ACK_WAIT
from taskq.records.clock import SECONDS

KeySource = str | Callable[..., Any]

PRIORITIES = range(10)
DEFAULT_PRIORITY = 5
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")


@dataclass(frozen=True)
class Rate:
    """A rate limit: at most `limit` starts in any `period` seconds (a sliding window)."""

    limit: int
    period: float

    @classmethod
    def parse(cls, text: str, task: str) -> Rate:
        match = _RATE.match(text) if isinstance(text, str) else None
        if match is None or int(match.group(1)) < 1:
            raise ConfigError(
                f"task {task!r}: rate_limit must look like '50/s', '10/m' or '100/h', not {text!r}"
            )
        return cls(int(match.group(1)), float(SECONDS[match.group(2)[0]]))

    def __str__(self) -> str:
        unit = next(unit for unit, seconds in SECONDS.items() if seconds == self.period)
        return f"{self.limit}/{unit}"


@dataclass(frozen=True)
class FlowLimits:
    """The limits the worker checks before running a task (None: no such limit)."""

    task: str
    max_concurrency: int | None = None  # the task's lane consumer: max_ack_pending
    concurrency_key: KeySource | None = None
    max_per_key: int | None = None
    rate: Rate | None = None
    rate_key: KeySource | None = None
    # the task's ack_wait: a crashed holder's slot comes back after it
    lease: float = DEFAULT_ACK_WAIT

    @property
    def lane(self) -> bool:
        """True when the task has its own consumer (global concurrency)."""
        return self.max_concurrency is not None


def flow_limits(
    task: str, signature: inspect.Signature, lease: float, options: dict[str, Any]
) -> FlowLimits | None:
    """The task's FlowLimits from its declaration options, or None when it has none (the
    worker's check is then one attribute test)."""
    max_concurrency = _count(task, "max_concurrency", options.get("max_concurrency"))
    max_per_key = _count(task, "max_per_key", options.get("max_per_key"))
    concurrency_key = _key(task, "concurrency_key", options.get("concurrency_key"), signature)
    if (concurrency_key is None) != (max_per_key is None):
        raise ConfigError(f"task {task!r}: concurrency_key= and max_per_key= go together")
    text = options.get("rate_limit")
    rate = None if text is None else Rate.parse(text, task)
    rate_key = _key(task, "rate_limit_key", options.get("rate_limit_key"), signature)
    if rate_key is not None and rate is None:
        raise ConfigError(f"task {task!r}: rate_limit_key= needs rate_limit=")
    if max_concurrency is None and max_per_key is None and rate is None:
        return None
    return FlowLimits(task, max_concurrency, concurrency_key, max_per_key, rate, rate_key, lease)


def check_priority(task: str, priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITIES:
        raise ConfigError(f"task {task!r}: priority must be a whole number from 0 to 9")
    return priority


def _count(task: str, name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"task {task!r}: {name} must be a whole number >= 1, not {value!r}")
    return value


def _key(task: str, name: str, source: object, signature: inspect.Signature) -> KeySource | None:
    if source is None or callable(source):
        return source
    if isinstance(source, str) and source in signature.parameters:
        return source
    raise ConfigError(
        f"task {task!r}: {name} must name one of its arguments "
        f"{list(signature.parameters)} or be a function of its arguments, not {source!r}"
    )


def key_of(
    source: KeySource, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str:
    """The key of one call: the named argument's value, or what the function returns."""
    if callable(source):
        return str(source(*args, **kwargs))
    bound = signature.bind_partial(*args, **kwargs)
    bound.apply_defaults()
    return str(bound.arguments.get(source))
