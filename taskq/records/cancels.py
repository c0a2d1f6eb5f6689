"""Cancelling tasks: durable cancel requests in the `<PREFIX>_CANCELS` key-value bucket.

A request is a key per task id, kept as long as results. Every worker follows the bucket,
so a task delivered later (queued, delayed, or waiting for a retry) is settled as
`cancelled` without running, and a running one is stopped: an `async` task is cancelled, a
process-pool task's child is killed, a thread task sees `taskq.current().cancelled` (it
cannot be interrupted) and is settled as cancelled when it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_core import to_json

from taskq.client import Client, ClientSource
from taskq.ids import safe_id
from taskq.operate.locate import Waiting, find_scheduled
from taskq.records.clock import now_iso
from taskq.records.heartbeats import running_on, worker_name
from taskq.records.results import FINAL, ResultRecord, fetch, store
from taskq.retrying import retry_transient
from taskq.topology.specs import cancels_bucket

CANCELLED = "cancelled"  # the task will not run (it was waiting): recorded at once
CANCELLING = "cancelling"  # it is running: its worker stops it and records it
FINISHED = "finished"  # too late: it already ended (`state` says how)
UNKNOWN = "unknown"  # nothing indexed knows the id (stored anyway: if it waits, it never runs)


@dataclass(frozen=True)
class CancelReport:
    """What a cancel request found and did."""

    task_id: str
    outcome: str  # CANCELLED, CANCELLING, FINISHED or UNKNOWN
    state: str  # where the task was: queued, delayed, running, or its final state
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {
            "id": self.task_id,
            "outcome": self.outcome,
            "state": self.state,
            "detail": self.detail,
        }


async def ensure_cancels(client: Client) -> None:
    spec = cancels_bucket(client.names, client.settings)
    await retry_transient(lambda: client.connection.kv.ensure(spec), what="cancels bucket set-up")


async def cancel(source: ClientSource, task_id: str) -> CancelReport:
    """Ask for `task_id` to be cancelled wherever it is; say what was found.

    Only what the server indexes by id is read (its record, its schedule, the workers'
    running tasks, the queues' dedup windows): a cost that does not grow with the backlog.
    A task enqueued before the dedup window with no record yet is not found (UNKNOWN),
    and the durable request stops it all the same when it is delivered."""
    client = await source.client()
    record = await fetch(client, task_id)
    if record is not None and record.state in FINAL:
        return CancelReport(task_id, FINISHED, record.state, f"already {record.state}")
    waiting = await find_scheduled(client, task_id)
    await request(client, task_id)
    worker = await running_on(client, task_id)
    if worker:
        return CancelReport(task_id, CANCELLING, "running", f"running on {worker}: stopping it")
    if waiting is None and record is None:
        return CancelReport(
            task_id,
            UNKNOWN,
            "unknown",
            "no record, schedule, worker or recent enqueue knows it (if it waits, it never runs)",
        )
    await store(client, task_id, _cancelled(waiting, record))
    where = waiting.where if waiting is not None else record.state if record else "queued"
    return CancelReport(task_id, CANCELLED, where, "it will not run")


async def request(client: Client, task_id: str) -> None:
    """Store the durable request every worker sees (idempotent)."""
    await ensure_cancels(client)
    body = to_json({"id": task_id, "requested_at": now_iso(), "by": worker_name()})
    bucket, key = client.names.cancels_bucket, safe_id(task_id)
    await retry_transient(
        lambda: client.connection.kv.put(bucket, key, body), what="cancel request"
    )


def _cancelled(waiting: Waiting | None, record: ResultRecord | None) -> ResultRecord:
    envelope = waiting.envelope if waiting is not None else None
    return ResultRecord(
        state="cancelled",
        task=envelope.task if envelope else (record.task if record else ""),
        reason="cancelled before it ran",
        attempts=record.attempts if record else 0,
        queue=waiting.queue if waiting else (record.queue if record else ""),
        args=envelope.args if envelope else None,
        kwargs=envelope.kwargs if envelope else None,
        enqueued_at=envelope.enqueued_at if envelope else None,
    )
