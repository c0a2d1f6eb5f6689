"""Worker heartbeats: one record per live worker process, in the
`<PREFIX>_WORKERS` key-value bucket (`taskq workers`).

A worker writes its record every `settings.heartbeat` seconds and deletes it when it stops;
the bucket's TTL (three beats) removes the record of one that was killed. A beat is one
write whatever the task rate: the record lists the tasks running at that moment.
"""

from __future__ import annotations

import asyncio
import os
import socket
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskq.client import Client, ClientSource
from taskq.records.clock import now_iso, parse_time
from taskq.retrying import retry_transient
from taskq.topology.specs import workers_bucket

# a worker's tallies per queue (its stats' keys): tasks settled (their end), and copies
# published while holding tasks (they land in the queue again, and are no new task)
SETTLED_IN, COPIED_IN = "settled:", "copied:"


def worker_name() -> str:
    """This process, as named in the records it writes (`host:pid`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class RunningTask(BaseModel):
    """A task a worker is running, as its last heartbeat saw it."""

    id: str
    task: str
    queue: str
    attempt: int
    started_at: str


class WorkerRecord(BaseModel):
    """One worker process as it described itself at its last heartbeat."""

    model_config = ConfigDict(extra="ignore")

    id: str
    host: str
    pid: int
    version: str
    queues: list[str]
    concurrency: int
    pool_size: int | None = None
    started_at: str
    heartbeat_at: str
    counts: dict[str, int] = Field(default_factory=dict)
    running: list[RunningTask] = Field(default_factory=list)
    problem: str | None = None  # why it is unhealthy (a fetch loop failing); None: healthy
    # the tasks it runs, as `<queue>:<task>` (at most MAX_TASKS_LISTED): a worker starting
    # beside one that runs other tasks on a queue they share says so
    tasks: list[str] = Field(default_factory=list)
    # per queue, over its last 10 s of beats (workers/heartbeat.py): tasks settled and held
    # copies published per second
    # (`taskq queues`' DONE/s, and what its IN/s leaves out)
    rates: dict[str, dict[str, float]] = Field(default_factory=dict)
    # the counts those rates come from, since it started (`settled:<queue>`,
    # `copied:<queue>`): two reads of the record give a rate over their own window
    tallies: dict[str, int] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return worker_key(self.id)

    def uptime(self, now: datetime | None = None) -> float:
        return _age(self.started_at, now)

    def heartbeat_age(self, now: datetime | None = None) -> float:
        return _age(self.heartbeat_at, now)

    def to_dict(self) -> dict[str, object]:
        """Its JSON view (`taskq workers --json`, the dashboard's): the record, plus uptime
        and heartbeat age in seconds."""
        return {
            **self.model_dump(),
            "uptime": round(self.uptime(), 3),
            "heartbeat_age": round(self.heartbeat_age(), 3),
        }


def worker_key(worker_id: str) -> str:
    """A KV key for a worker id (`host:pid` holds a colon, which keys may not)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in worker_id)


MAX_TASKS_LISTED = 2000  # tasks a worker's record names, at most


def started_record(
    queues: list[str],
    concurrency: int,
    pool_size: int | None,
    version: str,
    tasks: list[str] | None = None,
) -> WorkerRecord:
    """This process's record at start-up (the heartbeat refreshes counts and running)."""
    now = now_iso()
    return WorkerRecord(
        tasks=sorted(tasks or [])[:MAX_TASKS_LISTED],
        id=worker_name(),  # as DLQ records and task stories name it
        host=socket.gethostname(),
        pid=os.getpid(),
        version=version,
        queues=queues,
        concurrency=concurrency,
        pool_size=pool_size,
        started_at=now,
        heartbeat_at=now,
    )


async def ensure_workers(client: Client) -> None:
    spec = workers_bucket(client.names, client.settings)
    await retry_transient(lambda: client.connection.kv.ensure(spec), what="workers bucket set-up")


async def list_workers(source: ClientSource) -> list[WorkerRecord]:
    """Every live worker, oldest first."""
    client = await source.client()
    await ensure_workers(client)
    # The keys, then each value: no watcher, whose consumer would outlive the call on the
    # server (a thousand calls within its inactivity threshold, say from dashboards
    # refreshing, and the bucket refuses new consumers: "maximum consumers limit reached").
    kv, bucket = client.connection.kv, client.names.workers_bucket
    values = await asyncio.gather(*(kv.get(bucket, key) for key in await kv.keys(bucket, ">")))
    found = []
    for value in values:
        if value is None:
            continue  # stopped (a delete marker) or expired meanwhile
        try:
            found.append(WorkerRecord.model_validate_json(value[0]))
        except ValidationError:
            continue  # a foreign value: not a worker
    return sorted(found, key=lambda w: w.started_at)


async def running_on(source: ClientSource, task_id: str) -> str:
    """The id of the worker whose last heartbeat listed `task_id` as running ("" if none)."""
    for worker in await list_workers(source):
        if any(r.id == task_id for r in worker.running):
            return worker.id
    return ""


def _age(text: str, now: datetime | None) -> float:
    return max(0.0, ((now or datetime.now(UTC)) - parse_time(text)).total_seconds())
