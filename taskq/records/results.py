"""Task states and results in the `<PREFIX>_RESULTS` key-value bucket
(docs/results-workflows-schedules.md).

The worker writes a task's record before acknowledging its message, so a result is never
missing for a task that left its queue. Waiting watches the key's subject (a core NATS
subscription opened before the first read); a write racing that subscription is caught by
re-reading on a backoff (50 ms doubling to 2 s) only while no update arrives.
States: `queued` (no record yet), `failed` (an attempt failed, a retry is coming),
`succeeded`, `dead` (dead-lettered), `cancelled`, `dropped` (a throttled enqueue; final,
all four). The bucket keeps a retried task's earlier records as history: its attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import to_json

from taskq.client import Client, ClientSource
from taskq.errors import (
    ResultTimeout,
    StorageFull,
    TaskCancelled,
    TaskDropped,
    TaskFailed,
    TransientError,
)
from taskq.ids import safe_id
from taskq.records.clock import now_iso
from taskq.retrying import patiently, retry_transient
from taskq.topology.specs import results_buckets

log = logging.getLogger("taskq")

FINAL = ("succeeded", "dead", "cancelled", "dropped")  # dropped: by a throttle window


class ResultRecord(BaseModel):
    """The value stored per task id."""

    model_config = ConfigDict(extra="ignore")

    state: str
    task: str = ""
    result: Any = None
    error: dict[str, str] | None = None
    reason: str = ""
    attempts: int = 0
    updated_at: str = ""
    # the attempt that wrote it, and the task's call (a task's story outlives its message)
    queue: str = ""
    worker: str = ""
    started_at: str | None = None
    args: list[Any] | None = None
    kwargs: dict[str, Any] | None = None
    enqueued_at: str | None = None
    workflow: str | None = None  # the id of the workflow's final task, for a member
    # a workflow's final task that never ran: the step whose failure (or cancel) ended it
    failed_step: str | None = None

    def raise_if_failed(self, task_id: str) -> None:
        if self.state == "cancelled":
            raise TaskCancelled(task_id)
        if self.state == "dropped":
            kept = self.result.get("kept", "") if isinstance(self.result, dict) else ""
            raise TaskDropped(task_id, self.reason, kept)
        if self.state == "dead":
            error = self.error or {}
            raise TaskFailed(
                task_id,
                self.state,
                error.get("type", ""),
                error.get("message", ""),
                error.get("traceback", ""),
                self.reason,
            )


_FIELDS = tuple(ResultRecord.model_fields)


async def ensure_results(client: Client) -> None:
    """Every bucket of the configured results layout exists (made when missing)."""
    for spec in results_buckets(client.names, client.settings):
        await retry_transient(
            lambda s=spec: client.connection.kv.ensure(s),  # type: ignore[misc]
            what="results bucket set-up",
        )


_DEFAULTS = {name: info.default for name, info in ResultRecord.model_fields.items()}


def encoded(fields: dict[str, Any]) -> bytes:
    """A record's stored bytes from (some of) its fields, the rest at their defaults, in the
    model's order, stamped `updated_at` now."""
    full = {name: fields.get(name, default) for name, default in _DEFAULTS.items()}
    full["updated_at"] = now_iso()
    return to_json(full, fallback=repr)


def run_key(run_id: str) -> str:
    """Where a durable run's own record is kept: a key no task's id maps to (taskq.ids
    reserves `w.`), so no task enqueued under the run's id can replace the run's result."""
    return "w." + safe_id(run_id)


async def store(client: Client, task_id: str, record: ResultRecord, key: str | None = None) -> None:
    """Write a task's record (acknowledged by the server); `key`: a run's (run_key)."""
    # the fields as a dict directly: model_copy + model_dump cost more than the write itself
    body = encoded({name: getattr(record, name) for name in _FIELDS})
    await store_encoded(client, task_id, body, key)


async def store_encoded(client: Client, task_id: str, body: bytes, key: str | None = None) -> None:
    """Write a record already `encoded` (acknowledged by the server, retried while transient);
    a record refused by a full store is skipped with a warning."""
    key = key or safe_id(task_id)
    bucket = client.results.of(key)
    try:
        await retry_transient(
            lambda: client.connection.kv.put(bucket, key, body), what="result write"
        )
    except StorageFull as exc:
        # A full store must not stop the drain: settling frees space, a record cannot.
        # The record is lost, visibly; dead letters keep theirs (the DLQ write is separate).
        log.warning("result of task %s not stored: %s", task_id, exc)


async def fetch(source: ClientSource, task_id: str) -> ResultRecord | None:
    """The task's record as it stands, else the durable run's of that id (None: neither
    has a record yet)."""
    client = await source.client()
    await ensure_results(client)
    found = await _read(client, safe_id(task_id), anywhere=True)
    return found or await _read(client, run_key(task_id), anywhere=True)


async def fetch_run(source: ClientSource, run_id: str) -> ResultRecord | None:
    """A durable run's own record (None: it has none yet): under its run key alone."""
    client = await source.client()
    await ensure_results(client)
    return await _read(client, run_key(run_id), anywhere=True)


async def wait(
    source: ClientSource, task_id: str, timeout: float | None, key: str | None = None
) -> ResultRecord:
    """The task's final record (succeeded or dead), waiting up to `timeout` seconds;
    `key`: a run's (run_key)."""
    client = await source.client()
    await ensure_results(client)
    key = key or safe_id(task_id)
    async with key_updates(client, client.results.of(key), key) as updates:
        return await _final(client, key, task_id, updates, timeout)


@contextlib.asynccontextmanager
async def key_updates(client: Client, bucket: str, key: str) -> AsyncIterator[asyncio.Queue[bytes]]:
    """The values written to `key` from now on, as they come (a core subscription, open
    before the caller's first read so no write is missed)."""
    updates: asyncio.Queue[bytes] = asyncio.Queue()

    async def on_update(_subject: str, data: bytes) -> None:
        await updates.put(data)

    stop = await client.connection.kv.watch(bucket, key, on_update)
    try:
        yield updates
    finally:
        await stop()


async def _final(
    client: Client,
    key: str,
    task_id: str,
    updates: asyncio.Queue[bytes],
    timeout: float | None,
) -> ResultRecord:
    deadline = None if timeout is None else time.monotonic() + timeout
    record = await _waited_read(client, key, None, anywhere=True)  # an earlier layout's too
    recheck = 0.05
    while record is None or record.state not in FINAL:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise ResultTimeout(task_id, timeout or 0.0, record.state if record else "queued")
        pause = recheck if remaining is None else min(recheck, remaining)
        try:
            update = _parse(await asyncio.wait_for(updates.get(), pause))
            if update is not None and update.state in FINAL:
                return await _stored_final(client, key, update)
            record = update or record
        except TimeoutError:
            # A write that reached the server just before our subscription may not have
            # been readable yet at the first read: read again, less often each time; the
            # other results buckets (a worker of an earlier layout) at most every 2 s.
            record = await _waited_read(client, key, record, anywhere=recheck >= 2.0)
            recheck = min(recheck * 2, 2.0)
    return record


async def _waited_read(
    client: Client, key: str, known: ResultRecord | None, *, anywhere: bool
) -> ResultRecord | None:
    """A read while waiting for a result: one the server does not answer (a loaded or
    electing server, past `patiently`'s bound) leaves what was known, and the wait goes
    on to the caller's own timeout rather than ending on a transient error."""
    try:
        return await _read(client, key, anywhere=anywhere) or known
    except TransientError as exc:
        log.debug("result of %s not read (%s): waiting on", key, exc)
        return known


async def _stored_final(client: Client, key: str, seen: ResultRecord) -> ResultRecord:
    """The final record `seen` on the key's subject, once the bucket has stored it. The
    subscription gets a write as the server routes it, before its stream has stored it,
    so a read right after (`status()`, a listing) could still miss it: a caller told that
    its task ended must find that end stored. Read until it is (STORED_WITHIN at most)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + STORED_WITHIN
    while True:
        stored = await _waited_read(client, key, None, anywhere=False)
        if (stored is not None and stored.state in FINAL) or loop.time() >= until:
            return stored if stored is not None and stored.state in FINAL else seen
        await asyncio.sleep(0.005)


STORED_WITHIN = 2.0  # seconds a final record seen on its subject may take to be readable


async def _read(client: Client, key: str, *, anywhere: bool = False) -> ResultRecord | None:
    """The key's record in its bucket; `anywhere`: else in any other results bucket (one
    a changed layout left)."""
    record = await _read_in(client, client.results.of(key), key)
    if record is None and anywhere:  # the other buckets at once: one round trip
        others = await client.results.elsewhere(key)
        found = await asyncio.gather(*(_read_in(client, bucket, key) for bucket in others))
        record = next((r for r in found if r is not None), None)
    return record


async def _read_in(client: Client, bucket: str, key: str) -> ResultRecord | None:
    # an idempotent read: it rides out a leader election (a node lost in a cluster)
    found = await patiently(lambda: client.connection.kv.get(bucket, key))
    return _parse(found[0]) if found else None


def _parse(data: bytes) -> ResultRecord | None:
    try:
        return ResultRecord.model_validate_json(data)
    except ValidationError:
        return None  # a delete marker or a foreign value: not a record
