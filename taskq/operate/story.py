"""A task's whole story by id (`taskq task ID`): what the server already holds, put together.

Nothing is written for it beyond what running a task writes anyway: the results bucket's
history of the task's key holds one record per settled attempt (which worker, when, how it
ended) and the call itself; the queue stream holds a task still waiting (or running); the
heartbeats name the worker running it; the progress bucket its last report; the DLQ its dead
letter. Attempts whose worker died left no record: their numbers are missing from the list.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from taskq.client import Client, ClientSource
from taskq.ids import safe_id
from taskq.nats import KVEntry
from taskq.operate.locate import Waiting, find_waiting
from taskq.records.envelope import MSG_ID
from taskq.records.heartbeats import running_on
from taskq.records.progress import Progress, latest
from taskq.records.results import FINAL, ResultRecord, ensure_results, fetch
from taskq.states import QUEUED

_DIGEST = re.compile(r"h\.[0-9a-f]{64}")  # the key of an id that is not plain (safe_id)


@dataclass
class Attempt:
    """One settled attempt, from its result record."""

    number: int
    state: str
    worker: str
    started_at: str | None
    ended_at: str
    error: dict[str, str] | None = None


@dataclass
class TaskStory:
    """Everything known about one task."""

    id: str
    task: str = ""
    queue: str = ""
    state: str = "queued"  # queued, delayed, held, running, failed (retrying), or final
    args: list[Any] | None = None
    kwargs: dict[str, Any] | None = None
    enqueued_at: str | None = None
    due: str = ""  # a delayed task's schedule (or when a held one is due to be retried)
    held_by: str = ""  # the flow-control limit holding it back (state "held")
    running_on: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    progress: dict[str, Any] | None = None
    result: Any = None
    error: dict[str, str] | None = None
    reason: str = ""
    dead_letter: dict[str, Any] | None = None
    workflow: str | None = None
    failed_step: str | None = None  # a final task that never ran: the step that ended it
    failed_task: str = ""  # ...and that step's task

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def story(source: ClientSource, task_id: str) -> TaskStory | None:
    """The task's story, or None when nothing anywhere knows this id."""
    client = await source.client()
    await ensure_results(client)
    records = await _records(client, task_id)
    final = records[-1] if records and records[-1].state in FINAL else None
    waiting = None if final is not None else await find_waiting(client, task_id)
    if waiting is None and final is None:
        # it may have settled between the two reads: its record is stored before its
        # message leaves the queue, so a second read of the records finds it
        records = await _records(client, task_id)
    if not records and waiting is None:
        return None
    attempts = [
        r
        for r in records
        if (r.state != "cancelled" or r.worker) and not r.failed_step and r.state != QUEUED
    ]  # a requeue's `queued` mark is no attempt
    told = TaskStory(task_id, attempts=[_attempt(r) for r in attempts])
    _from_records(told, records)
    if told.failed_step:
        step = await fetch(client, told.failed_step)
        told.failed_task = step.task if step is not None else ""
    if waiting is not None:
        _from_waiting(told, waiting)
        told.running_on = await running_on(client, task_id)
        told.state = "running" if told.running_on else told.state
    report = await latest(client, task_id)
    told.progress = report.model_dump() if isinstance(report, Progress) else None
    if told.state == "dead":
        told.dead_letter = await _dead_letter(client, told)
    return told


async def _records(client: Client, task_id: str) -> list[ResultRecord]:
    history = await _history(client, safe_id(task_id))
    if not history and _DIGEST.fullmatch(task_id):  # a key as listed (taskq.operate.task_list)
        history = await _history(client, task_id)
    found = []
    for entry in history:
        if not entry.deleted:
            try:
                found.append(ResultRecord.model_validate_json(entry.value))
            except ValueError:
                continue
    return found


async def _history(client: Client, key: str) -> list[KVEntry]:
    """The key's records in its results bucket, else in one a changed layout left."""
    kv = client.connection.kv
    history = await kv.history(client.results.of(key), key)
    for bucket in [] if history else await client.results.elsewhere(key):
        history = history or await kv.history(bucket, key)
    return history


def _attempt(record: ResultRecord) -> Attempt:
    return Attempt(
        record.attempts,
        record.state,
        record.worker,
        record.started_at,
        record.updated_at,
        record.error,
    )


def _from_records(told: TaskStory, records: list[ResultRecord]) -> None:
    for record in records:  # oldest first: the latest says most
        told.task = record.task or told.task
        told.queue = record.queue or told.queue
        told.args = record.args if record.args is not None else told.args
        told.kwargs = record.kwargs if record.kwargs is not None else told.kwargs
        told.enqueued_at = record.enqueued_at or told.enqueued_at
        told.workflow = record.workflow or told.workflow
    if records:
        last = records[-1]
        told.state, told.result, told.error, told.reason = (
            last.state,
            last.result,
            last.error,
            last.reason,
        )
        told.failed_step = last.failed_step


def _from_waiting(told: TaskStory, waiting: Waiting) -> None:
    told.queue = waiting.queue
    if told.state not in ("failed",) or waiting.where == "held":
        told.state = waiting.where
    told.due = waiting.due
    told.held_by = waiting.held_by
    envelope = waiting.envelope
    if envelope is not None:
        told.task, told.args, told.kwargs = envelope.task, envelope.args, envelope.kwargs
        told.enqueued_at = envelope.enqueued_at
        final = getattr(envelope.workflow, "final", None)
        told.workflow = str(final) if final and final != told.id else told.workflow


async def _dead_letter(client: Client, told: TaskStory) -> dict[str, Any] | None:
    names = client.names
    subject = names.dlq_filter_for(told.queue or None, told.task or None)
    wanted = f"{safe_id(told.id)}.dead."
    async for stored in client.connection.messages.read(names.dlq_stream, subject):
        if stored.headers.get(MSG_ID, "").startswith(wanted):
            letter: dict[str, Any] = json.loads(stored.data)
            letter["seq"] = stored.seq
            return letter
    return None
