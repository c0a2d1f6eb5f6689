"""Reading what a page's URL or form says: dead-letter filters, durations, cursors.

Durations are the CLI's (`30s`, `15m`, `2h`, `7d`) and parsed by the CLI's own parser;
anything unreadable is a 400 with the reason, never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from taskq.cli.common import parse_duration
from taskq.dashboard.config import DashboardError
from taskq.dlq.browse import Filters
from taskq.dlq.record import REASONS
from taskq.errors import ConfigError
from taskq.operate.task_list import TaskFilters
from taskq.topology.names import check_queue, check_task

FILTER_KEYS = ("queue", "task", "reason", "since", "until", "q")
TASK_KEYS = ("name", "queue", "state", "id")  # the task list's filters


def text(values: Mapping[str, Any], name: str) -> str | None:
    """A text field, stripped; None when absent or blank."""
    value = values.get(name)
    return (value.strip() or None) if isinstance(value, str) else None


def duration(value: str | None, name: str) -> float | None:
    """A DURATION field (`15m`) in seconds; None when blank."""
    if not value:
        return None
    try:
        return parse_duration(None, None, value)
    except click.BadParameter as exc:
        raise DashboardError(400, f"{name}: {exc.format_message()}") from None


def cursor(values: Mapping[str, Any], name: str) -> int | None:
    """A page cursor: a stream sequence, or a stored time in microseconds (the tasks of a
    partitioned results layout)."""
    value = text(values, name)
    if value is None:
        return None
    if not value.isdigit():
        raise DashboardError(400, f"{name} must be a page cursor (a whole number), not {value!r}")
    return int(value)


def dlq_filters(values: Mapping[str, Any]) -> Filters:
    """The dead-letter filters a page's query (or a form) gives."""
    queue, task, reason = text(values, "queue"), text(values, "task"), text(values, "reason")
    try:
        if queue:
            check_queue(queue)
        if task:
            check_task(task)
    except ConfigError as exc:
        raise DashboardError(400, str(exc)) from None
    if reason and reason not in REASONS:
        raise DashboardError(400, f"reason must be one of {', '.join(REASONS)}, not {reason!r}")
    return Filters(
        queue=queue,
        task=task,
        reason=reason,
        since=duration(text(values, "since"), "since"),
        until=duration(text(values, "until"), "until"),
        text=text(values, "q"),
    )


def filter_fields(values: Mapping[str, Any]) -> dict[str, str]:
    """The filters as given (for links and hidden fields that repeat them)."""
    return {key: value for key in FILTER_KEYS if (value := text(values, key)) is not None}


def task_filters(values: Mapping[str, Any]) -> TaskFilters:
    """The task list's filters (a 400 for a name, queue or state that cannot be one)."""
    try:
        return TaskFilters(
            name=text(values, "name"),
            queue=text(values, "queue"),
            state=text(values, "state"),
            id_prefix=text(values, "id"),
        )
    except ConfigError as exc:
        raise DashboardError(400, str(exc)) from None


def task_fields(values: Mapping[str, Any]) -> dict[str, str]:
    """The task list's filters as given (for links that repeat them)."""
    return {key: value for key in TASK_KEYS if (value := text(values, key)) is not None}
