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
    due: str = ""  # the schedule's expression, for a delayed task


async def find_waiting(client: Client, task_id: str) -> Waiting | None:
    """The task's message if it is still waiting, delayed or running; else None."""
    on_server = await queues_on_server(client.connection, client.names)
    for queue, parts in on_server.items():
        for part in parts:
            found = await _delayed(client, task_id, queue, part)
            if found is not None:
                return found
    for queue, parts in on_server.items():
        for part in parts:
            found = await _queued(client, task_id, queue, part)
            if found is not None:
                return found
    return None


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


async def _queued(client: Client, task_id: str, queue: str, part: Part) -> Waiting | None:
    names = client.names
    stream = names.queue_stream(queue, part)
    async for stored in client.connection.messages.scan(stream, names.queue_filter(queue, part)):
        if stored.headers.get(MSG_ID) == task_id:
            return Waiting("queued", queue, stream, stored.seq, _envelope(stored, queue))
    return None


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
