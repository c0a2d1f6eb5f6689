"""Task progress: what a running task reported with `taskq.current().progress(...)`, kept
in the `<PREFIX>_PROGRESS` key-value bucket (one key per task id, as long as results).

A value is a number from 0 to 1 or a JSON object, with an optional message. The worker
writes at most a few updates per second per task whatever the task reports, plus the last
one before the task settles; `handle.progress()` reads the latest and `handle.watch()`
streams them until the task ends.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from taskq.client import Client, ClientSource
from taskq.errors import NonFiniteFloat
from taskq.errors import ValidationError as TaskqValidationError
from taskq.ids import safe_id
from taskq.records.finite import finite_json
from taskq.records.results import FINAL, ResultRecord, fetch, key_updates
from taskq.retrying import retry_transient
from taskq.topology.specs import progress_bucket


class Progress(BaseModel):
    """One progress report of a task."""

    model_config = ConfigDict(extra="ignore")

    value: float | dict[str, Any]
    message: str | None = None
    attempt: int = 0
    at: str = ""


def checked(value: Any, message: str | None) -> tuple[float | dict[str, Any], str | None]:
    """The value and message as stored, or a ValidationError saying what is wrong."""
    if isinstance(value, bool) or not isinstance(value, int | float | dict):
        raise TaskqValidationError(
            f"progress must be a number from 0 to 1 or a dict, not {type(value).__name__}"
        )
    if isinstance(value, dict):
        try:
            finite_json(value, what="progress")
        except NonFiniteFloat as exc:  # stored, it would read back as None
            raise TaskqValidationError(str(exc)) from None
        except Exception as exc:
            raise TaskqValidationError(f"progress dict is not JSON: {exc}") from None
    elif not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise TaskqValidationError(f"progress must be between 0 and 1, not {value}")
    if message is not None and not isinstance(message, str):
        raise TaskqValidationError("progress message must be a string")
    return (float(value) if not isinstance(value, dict) else value), message


async def ensure_progress(client: Client) -> None:
    spec = progress_bucket(client.names, client.settings)
    await retry_transient(lambda: client.connection.kv.ensure(spec), what="progress bucket set-up")


async def write(client: Client, task_id: str, progress: Progress) -> None:
    """Store a task's latest progress (acknowledged)."""
    body = progress.model_dump_json().encode()
    bucket, key = client.names.progress_bucket, safe_id(task_id)
    await retry_transient(lambda: client.connection.kv.put(bucket, key, body), what="progress")


async def latest(source: ClientSource, task_id: str) -> Progress | None:
    """The task's latest progress report (None: it reported none)."""
    client = await source.client()
    await ensure_progress(client)
    found = await client.connection.kv.get(client.names.progress_bucket, safe_id(task_id))
    return _parse(found[0]) if found else None


async def watch(
    source: ClientSource, task_id: str, poll: float = 1.0
) -> AsyncIterator[Progress | ResultRecord]:
    """Progress reports as they come, then the task's final record (and stop)."""
    client = await source.client()
    await ensure_progress(client)
    bucket = client.names.progress_bucket
    async with key_updates(client, bucket, safe_id(task_id)) as updates:
        seen = await latest(client, task_id)
        if seen is not None:
            yield seen
        async for item in _until_final(client, task_id, updates, poll):
            yield item


async def _until_final(
    client: Client, task_id: str, updates: asyncio.Queue[bytes], poll: float
) -> AsyncIterator[Progress | ResultRecord]:
    # the final record is checked between updates (cheap: one read per `poll` seconds)
    while True:
        record = await fetch(client, task_id)
        if record is not None and record.state in FINAL:
            while not updates.empty():  # reports written just before the end
                report = _parse(updates.get_nowait())
                if report is not None:
                    yield report
            yield record
            return
        try:
            report = _parse(await asyncio.wait_for(updates.get(), poll))
        except TimeoutError:
            continue
        if report is not None:
            yield report


def _parse(data: bytes) -> Progress | None:
    try:
        return Progress.model_validate_json(data)
    except ValidationError:
        return None  # a delete marker or a foreign value
