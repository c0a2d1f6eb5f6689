"""Finding a task that has not finished by its id: waiting in a queue, or delayed.

A queued task is a message of its queue's stream until a worker acknowledges it (running
tasks too); a delayed one is a one-shot schedule named after its id. The server indexes
neither by id, so a queued task is found by reading the queue streams' messages (a
one-off, for an operator's question, never on a task's path).
"""

from __future__ import annotations

from dataclasses import dataclass

from taskq.client import Client
from taskq.envelope import MSG_ID, Envelope, decode
from taskq.errors import DecodeError, TaskqError
from taskq.flowcontrol.held import HELD, HELD_ROOT
from taskq.flowcontrol.keys import token
from taskq.nats import StoredMessage
from taskq.schedules import SCHEDULE
from taskq.topology.partitions import Part, queues_on_server


@dataclass(frozen=True)
class Waiting:
    """Where an unfinished task is: `queued` (or running) or `delayed` (a schedule)."""

    where: str
    queue: str
    stream: str
    seq: int
    envelope: Envelope | None
    due: str = ""  # the schedule's expression, for a delayed (or held) task
    held_by: str = ""  # the flow-control limit holding it back (where == "held")


async def find_waiting(client: Client, task_id: str) -> Waiting | None:
    """The task's message if it is still waiting, delayed or running; else None."""
    on_server = await queues_on_server(client.connection, client.names)
    for queue, parts in on_server.items():
        for part in parts:
            found = await _delayed(client, task_id, queue, part) or await _held(
                client, task_id, queue, part
            )
            if found is not None:
                return found
    for queue, parts in on_server.items():
        for part in parts:
            found = await _queued(client, task_id, queue, part)
            if found is not None:
                return found
    return None


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


async def _delayed(client: Client, task_id: str, queue: str, part: Part) -> Waiting | None:
    names = client.names
    stream = names.queue_stream(queue, part)
    try:
        stored = await client.connection.messages.last(
            stream, names.schedule_subject(queue, task_id, part)
        )
    except TaskqError:  # an id that cannot be part of a subject is no schedule's name
        return None
    if stored is None:
        return None
    return Waiting(
        "delayed",
        queue,
        stream,
        stored.seq,
        _envelope(stored, queue),
        stored.headers.get(SCHEDULE, ""),
    )


async def _held(client: Client, task_id: str, queue: str, part: Part) -> Waiting | None:
    """A task held back by a flow-control limit (its schedule `held.<id>.<limit>`), or a
    debounced one (its key's schedule holds its id)."""
    names, messages = client.names, client.connection.messages
    stream = names.queue_stream(queue, part)
    subject = names.schedule_subject(queue, f"{HELD_ROOT}.{token(task_id)}.>", part)
    stored = await messages.last(stream, subject)
    if stored is None or stored.headers.get(HELD) is None:
        async for stored in messages.scan(
            stream, names.schedule_subject(queue, "debounce.>", part)
        ):
            envelope = _envelope(stored, queue)
            if envelope is not None and envelope.id == task_id:
                return Waiting(
                    "delayed", queue, stream, stored.seq, envelope, stored.headers.get(SCHEDULE, "")
                )
        return None
    envelope = _envelope(stored, queue)
    due = stored.headers.get(SCHEDULE, "")
    return Waiting("held", queue, stream, stored.seq, envelope, due, stored.headers[HELD])


async def _queued(client: Client, task_id: str, queue: str, part: Part) -> Waiting | None:
    names = client.names
    stream = names.queue_stream(queue, part)
    for where in _task_filters(client, queue, part):
        async for stored in client.connection.messages.scan(stream, where):
            if stored.headers.get(MSG_ID) == task_id:
                return Waiting("queued", queue, stream, stored.seq, _envelope(stored, queue))
    return None


def _task_filters(client: Client, queue: str, part: Part) -> list[str]:
    """Where a queue's tasks wait: its subject, its concurrency lanes, its priority levels."""
    names = client.names
    return [
        names.queue_filter(queue, part),
        names.lane_filter(queue, part),
        names.rank_filter(queue, part),
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
