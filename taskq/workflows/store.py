"""Where durable workflow runs live on the server: each run's journal (one subject of the
`<PREFIX>_WORKFLOWS` stream, read in one batched direct get, appended with the server's
compare-and-set) and its summary (a key of the `<PREFIX>_RUNS` bucket, for listings)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic_core import from_json, to_json

from taskq.client import Client
from taskq.errors import (
    BrokerError,
    DecodeError,
    NonFiniteFloat,
    NotFound,
    PayloadTooLarge,
    TaskqError,
    TransientError,
)
from taskq.ids import new_id, safe_id
from taskq.nats import MULTI_LAST as MULTI_LAST
from taskq.nats import StoredMessage
from taskq.records.clock import now_iso
from taskq.records.finite import finite_json
from taskq.states import LEGACY_RUN, RUN_FINAL, RUN_STATES
from taskq.topology.specs import runs_bucket, workflows_stream
from taskq.workflows.journal import (
    JUNK,
    MAX_EVENT_BYTES,
    MAX_EVENTS,
    MAX_JOURNAL_BYTES,
    WRITERS,
    Event,
    decode,
)

log = logging.getLogger("taskq.worker")
STATES = RUN_STATES  # taskq.states: one vocabulary for tasks, steps, runs and canvases
FINAL = RUN_FINAL
SUMMARY_TRIES = 20


class JournalFull(TaskqError):
    """A run's journal reached a limit (`MAX_EVENTS` events or `MAX_JOURNAL_BYTES` bytes,
    junk a role wrote on its subjects counted): the run fails with this."""

    def __init__(self, run_id: str, events: int, limit: int = MAX_EVENTS, size: int = 0) -> None:
        self.run_id = run_id
        self.events = events
        self.limit = limit
        self.size = size
        self.size_limit = MAX_JOURNAL_BYTES
        super().__init__(
            f"workflow run {run_id} would have {events} journal events of {size:,} bytes, the "
            f"limits are {limit} events and {MAX_JOURNAL_BYTES:,} bytes: split the work into "
            "child workflows (wf.child) or batch steps (wf.map)"
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
    kind: str = "workflow"  # or chain, group, chord (taskq.workflows.canvas_runs)

    @field_validator("state")
    @classmethod
    def _state(cls, value: str) -> str:
        return LEGACY_RUN.get(value, value)  # what an earlier taskq wrote: today's word

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


async def ensure_runs(client: Client) -> None:
    """The runs bucket alone (chains, groups and chords keep their summaries there)."""
    if client.names.runs_bucket not in client.ensured:
        await client.connection.kv.ensure(runs_bucket(client.names, client.settings))
        client.ensured.add(client.names.runs_bucket)


async def ensure_workflows(client: Client) -> None:
    """The journals stream and the runs bucket (looked up first; made where allowed), once
    per connection: every decision and step's end asks."""
    connection, names, settings = client.connection, client.names, client.settings
    if names.workflows_stream in client.ensured:
        return
    await connection.streams.ensure(workflows_stream(names, settings))
    await connection.kv.ensure(runs_bucket(names, settings))
    client.ensured.add(names.workflows_stream)


async def read(client: Client, run_id: str, after: int = 0, long: bool = False) -> list[Event]:
    """The run's journal events stored after sequence `after`, oldest first, from its
    start on (what a role wrote on the run's subjects before its start is no part of it).
    A message that is no event (undecodable, too large, of a kind its subject does not
    hold: a forgery by a role that may write there) is a JUNK event: it answers nothing,
    but counts toward the journal's bounds; one warning per read names how many.

    Each event has a subject of its own, so one `multi_last` direct get finds them all by
    the server's subject index (a filtered read scans every message of the stream between
    the run's events: with many runs at once, that is most of its cost); a journal of more
    events than one such get answers is read in stream order from its start (at once when
    the caller knows it is `long`), up to its bounds."""
    names, messages = client.names, client.connection.messages
    within = names.journal_filter(safe_id(run_id))
    stored = None if long else await messages.lasts(names.workflows_stream, within, after)
    if stored is None:
        stored = await _scanned(client, run_id, after)
    found = [_event(message) for message in stored]
    if after == 0:
        found = _from_start(found)
    junk = [e for e in found if e.kind == JUNK]
    if junk:
        why = junk[0].details.get("why", "")
        log.warning("workflow run %s: %d journal message(s) left out (%s)", run_id, len(junk), why)
    return found


def _from_start(events: list[Event]) -> list[Event]:
    """The events from the run's start on (all of them when it has none)."""
    start = next((e for e in events if e.kind == "start"), None)
    return events if start is None else [e for e in events if e.seq >= start.seq]


def _event(message: StoredMessage) -> Event:
    """A stored journal message as an event (JUNK when it is none)."""
    when = message.time.timestamp() if message.time is not None else 0.0
    try:
        return decoded(message.data, message.seq, message.subject, when)
    except DecodeError as exc:
        size = len(message.data)
        return Event(JUNK, -1, {"why": str(exc)[:200]}, message.seq, "", size, when)


async def _scanned(client: Client, run_id: str, after: int) -> list[StoredMessage]:
    """A long journal's messages after `after`, in stream order, from its start on (at most
    a few more than MAX_EVENTS events or MAX_JOURNAL_BYTES bytes: a run past either bound
    fails with JournalFull)."""
    names, messages = client.names, client.connection.messages
    within = names.journal_filter(safe_id(run_id))
    seq = after + 1
    if after == 0:  # the start, a literal subject, is found by index, not by a scan
        start = await messages.batch(
            names.workflows_stream, 1, 1, names.journal_subject(safe_id(run_id), "s", "0")
        )
        seq = start[0].seq if start else seq
    found: list[StoredMessage] = []
    size = 0
    while True:
        batch = await messages.batch(names.workflows_stream, seq, 1000, within)
        found += batch
        size += sum(len(m.data) for m in batch)
        if len(batch) < 1000 or len(found) > MAX_EVENTS or size > MAX_JOURNAL_BYTES:
            return found
        seq = batch[-1].seq + 1


def decoded(data: bytes, seq: int, subject: str, stored_at: float = 0.0) -> Event:
    """The event a journal message holds; DecodeError for anything else. Parsed with a
    bounded depth and strict Unicode (a lone surrogate, NaN or a 5,000-deep array is no
    JSON here), and no larger than an event may be, whatever the stream let through."""
    if len(data) > MAX_EVENT_BYTES:
        raise DecodeError(f"journal event {seq} is {len(data):,} bytes, over {MAX_EVENT_BYTES:,}")
    try:
        value = from_json(data, allow_inf_nan=False)
    except ValueError:
        raise DecodeError(f"journal event {seq} is not JSON (or nested too deep)") from None
    if not isinstance(value, dict):
        raise DecodeError(f"journal event {seq} is not an object")
    writer, key = subject.rsplit(".", 2)[-2:]  # <prefix>.wf.<run>.<writer>.<key>
    if writer == WRITERS["start"] and key != "0":
        raise DecodeError(f"journal event {seq}: a start is only ever on its run's s.0")
    return decode(value, seq, writer, len(data), stored_at)


def _size(event: Event) -> int:
    return len(to_json(event.to_json(), fallback=repr))


def encoded(event: Event) -> bytes:
    """An event's stored JSON; PayloadTooLarge over MAX_EVENT_BYTES, NonFiniteFloat for a
    nan or infinity in it, Unjournalable for a value a reader would refuse (nested deeper
    than JSON readers take, a lone surrogate): what a worker writes, a worker reads back."""
    what = f"a {event.kind} journal event"
    try:
        body = finite_json(event.to_json(), what=what, fallback=repr)
    except NonFiniteFloat:
        raise
    except ValueError as exc:  # e.g. a string with a lone surrogate
        raise Unjournalable(event.kind, str(exc)) from None
    if len(body) > MAX_EVENT_BYTES:
        raise PayloadTooLarge(len(body), MAX_EVENT_BYTES, what)
    try:
        from_json(body, allow_inf_nan=False)
    except ValueError as exc:
        raise Unjournalable(event.kind, str(exc)) from None
    return body


class Unjournalable(TaskqError):
    """A value no journal reader would take back (too deeply nested, not valid Unicode)."""

    def __init__(self, kind: str, why: str) -> None:
        self.kind = kind
        self.why = why
        super().__init__(f"a {kind} journal event cannot hold this value: {why[:200]}")


async def append_after(client: Client, run_id: str, event: Event, last_seq: int) -> int | None:
    """Append `event` only if the last event of its writer (the start: no start yet) is
    still `last_seq` (0: none); its sequence, or None when another came first (the caller
    reads again)."""
    run, writer, names = safe_id(run_id), WRITERS[event.kind], client.names
    if event.kind == "start":
        subject, within = names.journal_subject(run, writer, "0"), None
    else:
        subject, within = (
            names.journal_subject(run, writer, new_id()),
            names.journal_filter(run, writer),
        )
    return await client.connection.records.replace(subject, encoded(event), last_seq, within=within)


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
    deduplicated by `msg_id` (a redelivered writer appends it once, on the same subject)."""
    subject = _subject_of(client, run_id, event, msg_id)
    headers = {"Nats-Msg-Id": msg_id}
    try:
        return await client.connection.records.put(subject, encoded(event), headers=headers)
    except BrokerError as exc:  # appended already, past the duplicate window: that one
        if "per subject" not in str(exc):
            raise
        names, messages = client.names, client.connection.messages
        stored = await messages.batch(names.workflows_stream, 1, 1, subject)
        if not stored:
            raise
        return stored[0].seq


async def append_if_last(
    client: Client, run_id: str, event: Event, msg_id: str, last_seq: int
) -> int | None:
    """Append `event` (deduplicated by `msg_id`) only if the run's last event of any writer
    is still `last_seq`; its sequence, or None when another came meanwhile."""
    return await client.connection.records.replace(
        _subject_of(client, run_id, event, msg_id),
        encoded(event),
        last_seq,
        headers={"Nats-Msg-Id": msg_id},
        within=client.names.journal_filter(safe_id(run_id)),
    )


async def find(client: Client, run_id: str, kind: str, msg_id: str) -> int | None:
    """Where the event `kind` appended under `msg_id` is stored (None: it is not): one
    direct get of its own subject."""
    subject = _subject_of(client, run_id, Event.make(kind), msg_id)
    stored = await client.connection.messages.last(client.names.workflows_stream, subject)
    if stored is None:
        return None
    try:
        event = decoded(stored.data, stored.seq or 1, subject)
    except DecodeError:
        return None
    return (stored.seq or 1) if event.kind == kind else None


def _subject_of(client: Client, run_id: str, event: Event, msg_id: str) -> str:
    """An appended event's own subject: its key is a digest of its message id, so a
    writer appending it again (redelivered) writes the same subject."""
    key = hashlib.sha256(msg_id.encode()).hexdigest()[:24]
    return client.names.journal_subject(safe_id(run_id), WRITERS[event.kind], key)


async def update_summary(
    client: Client,
    run_id: str,
    change: Callable[[RunSummary | None], RunSummary | None],
    kind: str = "workflow",
    ttl: float | None = None,
) -> None:
    """Apply `change` to the summary of the run (or chain, group or chord: `kind`) with
    compare-and-set: the one writer of the runs bucket. Its writers may write at once (a
    final state is never overwritten by a late `running`: `change` says so). A durable
    run's summary replaces whatever else holds its key; a canvas's never replaces what is
    not its own (left alone, nothing written). `ttl`: the summary expires that many
    seconds after this write (canvases; a durable run's is removed when the run expires)."""
    bucket, key = client.names.runs_bucket, safe_id(run_id)
    for _ in range(SUMMARY_TRIES):
        found = await client.connection.kv.get(bucket, key)
        current = parse_summary(found[0], any_kind=True) if found else None
        if found is not None and (current is None or current.kind != kind):
            if kind != "workflow":
                return  # a durable run's, another canvas's or unreadable: not this one's
            current = None
        new = change(current)
        if new is None:
            return
        new.updated_at = now_iso()
        body = new.model_dump_json().encode()
        revision = found[1] if found else 0
        where = f"$KV.{bucket}.{key}"
        if await client.connection.records.replace(where, body, revision, ttl=ttl):
            return
    raise TransientError(f"the summary of workflow run {run_id} kept changing")


async def forget(client: Client, run_id: str) -> None:
    """Remove the run's journal (every subject of it) and its summary, leaving no marker."""
    names, messages, key = client.names, client.connection.messages, safe_id(run_id)
    await messages.purge(names.workflows_stream, names.journal_filter(key))
    await messages.purge(f"KV_{names.runs_bucket}", f"$KV.{names.runs_bucket}.{key}")


async def load_summary(client: Client, run_id: str, any_kind: bool = False) -> RunSummary | None:
    """A durable run's summary (`any_kind`: a chain's, group's or chord's too)."""
    try:
        found = await client.connection.kv.get(client.names.runs_bucket, safe_id(run_id))
    except NotFound:  # no bucket yet: no run was ever started under this prefix
        return None
    return parse_summary(found[0], any_kind) if found is not None else None


def parse_summary(data: bytes, any_kind: bool = False) -> RunSummary | None:
    """A durable run's summary (None for anything else); `any_kind`: a chain's, group's or
    chord's too (listings). Everything that acts on runs sees durable runs' alone."""
    try:
        summary = RunSummary.model_validate_json(data)
    except ValueError:
        return None
    return summary if any_kind or summary.kind == "workflow" else None
