"""Where durable workflow runs live on the server: each run's journal (one subject of the
`<PREFIX>_WORKFLOWS` stream, read in one batched direct get, appended with the server's
compare-and-set) and its summary (a key of the `<PREFIX>_RUNS` bucket, for listings)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_json

from taskq.client import Client
from taskq.errors import DecodeError, NotFound, PayloadTooLarge, TaskqError, TransientError
from taskq.ids import new_id, safe_id
from taskq.records.clock import now_iso
from taskq.topology.specs import runs_bucket, workflows_stream
from taskq.workflows.journal import MAX_EVENT_BYTES, MAX_EVENTS, WRITERS, Event, decode

log = logging.getLogger("taskq.worker")
STATES = ("running", "sleeping", "waiting", "succeeded", "failed", "cancelled")
FINAL = frozenset({"succeeded", "failed", "cancelled"})
SUMMARY_TRIES = 20


class JournalFull(TaskqError):
    """A run's journal reached its limit (`MAX_EVENTS` events): the run fails with this."""

    def __init__(self, run_id: str, events: int, limit: int = MAX_EVENTS) -> None:
        self.run_id = run_id
        self.events = events
        self.limit = limit
        super().__init__(
            f"workflow run {run_id} would have {events} journal events, the limit is {limit}: "
            "split the work into child workflows (wf.child) or batch steps (wf.map)"
        )


class RunSummary(BaseModel):
    """What `taskq workflows ls` shows of a run (its journal holds everything else)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    name: str
    queue: str
    state: str = "running"
    started_at: str = ""
    updated_at: str = ""
    parent: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


async def ensure_workflows(client: Client) -> None:
    """The journals stream and the runs bucket (looked up first; made where allowed), once
    per connection: every decision and step's end asks."""
    connection, names, settings = client.connection, client.names, client.settings
    if names.workflows_stream in client.ensured:
        return
    await connection.streams.ensure(workflows_stream(names, settings))
    await connection.kv.ensure(runs_bucket(names, settings))
    client.ensured.add(names.workflows_stream)


async def read(client: Client, run_id: str, after: int = 0) -> list[Event]:
    """The run's journal events stored after sequence `after`, oldest first. An event
    that is not one (undecodable, or of a kind its subject does not hold: a forgery by a
    role that may write there) is left out, with a warning: it cannot stop the run."""
    names, messages = client.names, client.connection.messages
    subject = names.journal_subject(safe_id(run_id), "*")
    found: list[Event] = []
    seq = after + 1
    if after == 0:  # from the run's start: the server finds a literal subject by its index,
        # where a wildcard read scans every message of the stream before the run's first
        start = await messages.batch(
            names.workflows_stream, 1, 1, names.journal_subject(safe_id(run_id), WRITERS["start"])
        )
        if not start:
            return []  # no such run (what is left of one expired is nothing)
        seq = start[0].seq
    while True:
        batch = await messages.batch(names.workflows_stream, seq, 1000, subject)
        for stored in batch:
            try:
                found.append(decoded(stored.data, stored.seq, stored.subject))
            except DecodeError as exc:
                log.warning("workflow run %s: %s (left out)", run_id, exc)
        if len(batch) < 1000 or len(found) > MAX_EVENTS:
            return found
        seq = batch[-1].seq + 1


def decoded(data: bytes, seq: int, subject: str) -> Event:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise DecodeError(f"journal event {seq} is not JSON") from None
    if not isinstance(value, dict):
        raise DecodeError(f"journal event {seq} is not an object")
    return decode(value, seq, subject.rsplit(".", 1)[-1])


def _size(event: Event) -> int:
    return len(to_json(event.to_json(), fallback=repr))


def encoded(event: Event) -> bytes:
    body = to_json(event.to_json(), fallback=repr)
    if len(body) > MAX_EVENT_BYTES:
        raise PayloadTooLarge(len(body), MAX_EVENT_BYTES, f"a {event.kind} journal event")
    return body


async def append_after(client: Client, run_id: str, event: Event, last_seq: int) -> int | None:
    """Append `event` only if the last event of its subject is still `last_seq` (0: none);
    its sequence, or None when another came first (the caller reads again)."""
    subject = client.names.journal_subject(safe_id(run_id), WRITERS[event.kind])
    return await client.connection.records.replace(subject, encoded(event), last_seq)


@dataclass(frozen=True)
class Recorded:
    """A round as stored: its sequence, and its commands, each with the sequence of the
    message holding it (the round's, or a chunk's): where a worker checks a step."""

    seq: int
    commands: list[Event]


async def record_round(
    client: Client, run_id: str, round_: Event, last_seq: int
) -> Recorded | None:
    """Append a decision's round after the workers' event `last_seq` (compare-and-set);
    None when another came first. A round too large for one message stores its commands
    in chunks first, the round naming them: it is recorded, whole, only when its own
    message is (PayloadTooLarge: one command alone is over the limit)."""
    commands: list[Event] = round_.details.get("commands", [])
    if _size(round_) <= MAX_EVENT_BYTES:
        seq = await append_after(client, run_id, round_, last_seq)
        return None if seq is None else Recorded(seq, [replace(c, seq=seq) for c in commands])
    located: list[Event] = []
    chunks: list[int] = []
    for part in _parts(commands):
        chunk = Event.make("chunk", commands=part)
        chunks.append(await append(client, run_id, chunk, f"{safe_id(run_id)}.{new_id()}"))
        located.extend(replace(c, seq=chunks[-1]) for c in part)
    head = Event.make("decided", **{**round_.details, "commands": [], "chunks": chunks})
    seq = await append_after(client, run_id, head, last_seq)
    return None if seq is None else Recorded(seq, located)


def _parts(commands: list[Event]) -> list[list[Event]]:
    """`commands` cut into chunks of at most MAX_EVENT_BYTES each (encoded)."""
    parts: list[list[Event]] = [[]]
    size = 0
    for command in commands:
        one = _size(command) + 1
        if one > MAX_EVENT_BYTES - 64:
            raise PayloadTooLarge(one, MAX_EVENT_BYTES, f"step {command.n}'s command")
        if size + one > MAX_EVENT_BYTES - 64 and parts[-1]:
            parts.append([])
            size = 0
        parts[-1].append(command)
        size += one
    return parts


async def append(client: Client, run_id: str, event: Event, msg_id: str) -> int:
    """Append `event` whatever came before (a step's outcome, a signal, a timer, a cancel),
    deduplicated by `msg_id` (a redelivered writer appends it once)."""
    subject = client.names.journal_subject(safe_id(run_id), WRITERS[event.kind])
    headers = {"Nats-Msg-Id": msg_id}
    return await client.connection.records.put(subject, encoded(event), headers=headers)


async def update_summary(
    client: Client, run_id: str, change: Callable[[RunSummary | None], RunSummary | None]
) -> None:
    """Apply `change` to the run's summary with compare-and-set (decisions of one run may
    write at once: a final state is never overwritten by a late `running`)."""
    bucket, key = client.names.runs_bucket, safe_id(run_id)
    for _ in range(SUMMARY_TRIES):
        found = await client.connection.kv.get(bucket, key)
        current = parse_summary(found[0]) if found else None
        new = change(current)
        if new is None:
            return
        new.updated_at = now_iso()
        body = new.model_dump_json().encode()
        revision = found[1] if found else 0
        if await client.connection.records.replace(f"$KV.{bucket}.{key}", body, revision):
            return
    raise TransientError(f"the summary of workflow run {run_id} kept changing")


async def forget(client: Client, run_id: str) -> None:
    """Remove the run's journal (every subject of it) and its summary, leaving no marker."""
    names, messages, key = client.names, client.connection.messages, safe_id(run_id)
    await messages.purge(names.workflows_stream, names.journal_subject(key, "*"))
    await messages.purge(f"KV_{names.runs_bucket}", f"$KV.{names.runs_bucket}.{key}")


async def load_summary(client: Client, run_id: str) -> RunSummary | None:
    try:
        found = await client.connection.kv.get(client.names.runs_bucket, safe_id(run_id))
    except NotFound:  # no bucket yet: no run was ever started under this prefix
        return None
    return parse_summary(found[0]) if found is not None else None


def parse_summary(data: bytes) -> RunSummary | None:
    try:
        return RunSummary.model_validate_json(data)
    except ValueError:
        return None
