"""Finding a task that has not finished by its id: waiting in a queue, or delayed.

A queued task is a message of its queue's stream until a worker acknowledges it (running
tasks too); a delayed one is a one-shot schedule named after its id in its queue's timer
stream, a held one a schedule named after its id and limit there. Schedules are found by
subject (`find_scheduled`: a direct read per queue). The server indexes queued messages by
nothing an id names, so a queued task is found by reading the queue streams' messages
(`find_waiting`: a one-off, for an operator's question, never on a task's path).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from taskq.client import Client
from taskq.errors import BrokerError, DecodeError, TransientError
from taskq.flowcontrol.held import HELD, HELD_ROOT
from taskq.flowcontrol.keys import token
from taskq.ids import new_id, safe_id
from taskq.nats import StoredMessage
from taskq.records.clock import parse_time
from taskq.records.envelope import MSG_ID, Envelope, decode
from taskq.records.schedules import SCHEDULE, delayed_name
from taskq.topology.partitions import Part, queues_on_server

EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"


@dataclass(frozen=True)
class Waiting:
    """Where an unfinished task is: `queued` (or running), `delayed` or `held`."""

    where: str
    queue: str
    stream: str
    seq: int
    envelope: Envelope | None
    due: str = ""  # the schedule's expression, for a delayed (or held) task
    held_by: str = ""  # the flow-control limit holding it back (where == "held")


async def find_waiting(client: Client, task_id: str) -> Waiting | None:
    """The task's message if it is still waiting, delayed or running; else None."""
    found = await find_scheduled(client, task_id)
    if found is not None:
        return found
    for queue, parts in (await queues_on_server(client.connection, client.names)).items():
        for part in parts:
            found = await _queued(client, task_id, queue, part)
            if found is not None:
                return found
    return None


async def find_scheduled(client: Client, task_id: str) -> Waiting | None:
    """The task's schedule if it is delayed or held back by a limit, or its message if it
    was enqueued within the dedup window and still waits: a few reads per queue stream,
    whatever the backlog."""
    on_server = await queues_on_server(client.connection, client.names)
    for queue in on_server:
        found = await _delayed(client, task_id, queue) or await _held(client, task_id, queue)
        if found is not None:
            return found
    for queue, parts in on_server.items():
        for part in parts:
            found = await _enqueued_lately(client, task_id, queue, part)
            if found is not None:
                return found
    return None


async def _enqueued_lately(client: Client, task_id: str, queue: str, part: Part) -> Waiting | None:
    """The task's message if the stream's dedup window still knows its id. A probe
    publish with the id asks the server: it answers `duplicate` with the message's
    sequence if it does, and otherwise refuses it, storing nothing (an expectation no
    stream can meet, checked after the dedup check: `_impossible`)."""
    names, connection = client.names, client.connection
    stream = names.queue_stream(queue, part)
    subject = names.queue_subject(queue, "_probe", part)
    replicas = (await connection.streams.state(stream)).replicas
    headers = {MSG_ID: safe_id(task_id), **_impossible(replicas)}
    try:
        ack = await connection.publish(subject, b"", headers)
    except BrokerError as exc:
        if isinstance(exc, TransientError):
            raise
        return None
    if not ack.duplicate:  # cannot be: the expectation fails. Never leave it behind
        await connection.messages.delete(ack.stream, ack.seq)
        return None
    stored = await connection.messages.get(ack.stream, ack.seq)
    if stored is None:  # enqueued lately, and already taken
        return None
    envelope = _envelope(stored, queue)
    return Waiting(
        "delayed" if _ahead(envelope) else "queued", queue, ack.stream, ack.seq, envelope
    )


def _impossible(replicas: int) -> dict[str, str]:
    """A header whose expectation fails right after the dedup check, on a stream of
    `replicas`, without the server storing or proposing anything.

    The two paths of nats-server 2.15.1 check in different orders (measured, and read in
    stream.go and jetstream_batching.go): an R1 stream checks the dedup window, then the
    expected last message id; a replicated stream's leader checks the dedup window, then
    the expected last sequence, before it proposes. A replicated stream must never get
    the expected last message id: its leader proposes the message and every replica then
    fails to apply it ("critical write error: last msgid mismatch"), which stops the
    stream taking publishes (a cancel froze an R3 queue). On R1 the expected last
    sequence is checked before the dedup window, so it would answer nothing."""
    if replicas > 1:
        return {EXPECTED_LAST_SEQ: str(2**63)}
    return {EXPECTED_LAST_MSG_ID: f"probe:{new_id()}"}


async def waiting_with_prefix(client: Client, prefix: str) -> list[Waiting]:
    """Every queued (or running) task whose id starts with `prefix`, such as a workflow's
    steps (`<flow id>.`): one read of each queue stream."""
    found = []
    on_server = await queues_on_server(client.connection, client.names)
    for queue, parts in on_server.items():
        for part in parts:
            stream = client.names.queue_stream(queue, part)
            for subject in _task_filters(client, queue, part):
                async for stored in client.connection.messages.scan(stream, subject):
                    if stored.headers.get(MSG_ID, "").startswith(prefix):
                        envelope = _envelope(stored, queue)
                        found.append(Waiting("queued", queue, stream, stored.seq, envelope))
    return found


async def _delayed(client: Client, task_id: str, queue: str) -> Waiting | None:
    names = client.names
    stream = names.timer_stream(queue)
    subject = names.schedule_subject(queue, delayed_name(task_id))
    stored = await client.connection.messages.last(stream, subject)
    if stored is None:
        return None
    envelope = _envelope(stored, queue)
    return Waiting("delayed", queue, stream, stored.seq, envelope, stored.headers.get(SCHEDULE, ""))


async def _held(client: Client, task_id: str, queue: str) -> Waiting | None:
    """A task held back by a flow-control limit (its schedule `held.<id>.<limit>`)."""
    names = client.names
    stream = names.timer_stream(queue)
    subject = names.schedule_subject(queue, f"{HELD_ROOT}.{token(task_id)}.>")
    stored = await client.connection.messages.last(stream, subject)
    if stored is None or stored.headers.get(HELD) is None:
        return None
    envelope = _envelope(stored, queue)
    due = stored.headers.get(SCHEDULE, "")
    return Waiting("held", queue, stream, stored.seq, envelope, due, stored.headers[HELD])


async def _queued(client: Client, task_id: str, queue: str, part: Part) -> Waiting | None:
    names = client.names
    stream = names.queue_stream(queue, part)
    for where in _task_filters(client, queue, part):
        async for stored in client.connection.messages.scan(stream, where):
            envelope = _named(stored, task_id, queue)
            if envelope is not None:
                where = "delayed" if _ahead(envelope) else "queued"  # not yet a schedule
                return Waiting(where, queue, stream, stored.seq, envelope)
    return None


def _named(stored: StoredMessage, task_id: str, queue: str) -> Envelope | None:
    """The envelope of a stored message of task `task_id` (else None): its message id is
    the task's id, or (a durable run's step, published under `<id>.<digests>`) starts
    with it, the envelope then saying it is that task."""
    msg_id, safe = stored.headers.get(MSG_ID, ""), safe_id(task_id)
    if msg_id == safe:
        return _envelope(stored, queue)
    if not msg_id.startswith(safe + "."):
        return None
    envelope = _envelope(stored, queue)
    return envelope if envelope is not None and envelope.id == task_id else None


def _ahead(envelope: Envelope | None) -> bool:
    eta = envelope.eta if envelope is not None else None
    return bool(eta) and parse_time(eta) > datetime.now(UTC)  # type: ignore[arg-type]


def _task_filters(client: Client, queue: str, part: Part) -> list[str]:
    """Where a queue's tasks wait: its subject, its concurrency lanes, its priority levels."""
    names = client.names
    return [
        names.queue_filter(queue, part),
        names.lane_filter(queue, part),
        names.levels_filter(queue, part),
    ]


def _envelope(stored: StoredMessage, queue: str) -> Envelope | None:
    try:
        return decode(
            stored.data,
            subject_task=None,
            msg_id=stored.headers.get(MSG_ID),
            seq=stored.seq,
            headers=stored.headers,
            queue=queue,
            subject=stored.subject,
        )
    except DecodeError:
        return None
