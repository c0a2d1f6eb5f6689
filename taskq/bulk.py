"""Bulk enqueue: many task messages published pipelined (publish now, collect the acks after).

Each message still has its own `Nats-Msg-Id`, which makes re-publishing one whose ack was
lost safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from taskq.client import Client, Published
from taskq.errors import TaskqError
from taskq.ids import safe_id
from taskq.nats import PubAck
from taskq.records.envelope import MSG_ID, TASK_HEADER, Envelope
from taskq.retrying import retry_transient

WINDOW = 2048  # acks outstanding at once: bounds memory and the server's pending replies


def split(item: Any) -> tuple[list[Any], dict[str, Any]]:
    """An item is an args list/tuple, a kwargs dict, or a single positional value."""
    if isinstance(item, dict):
        return [], dict(item)
    if isinstance(item, list | tuple):
        return list(item), {}
    return [item], {}


async def publish_many(client: Client, envelopes: list[Envelope]) -> list[Published]:
    """Publish placed envelopes (each with its `subject`) pipelined; results in order."""
    published: list[Published] = []
    for start in range(0, len(envelopes), WINDOW):
        chunk = envelopes[start : start + WINDOW]
        acks = await _publish_chunk(client, chunk)
        published += [
            Published(e.id, e.task, e.queue, a.seq, a.duplicate)
            for e, a in zip(chunk, acks, strict=True)
        ]
    return published


def _headers(envelope: Envelope) -> dict[str, str]:
    return {**envelope.headers, MSG_ID: safe_id(envelope.id), TASK_HEADER: envelope.task}


async def _publish_chunk(client: Client, chunk: list[Envelope]) -> list[PubAck]:
    connection = client.connection
    waits: list[Awaitable[PubAck]] = []
    for envelope in chunk:
        body = envelope.encode()
        waits.append(await connection.publish_nowait(envelope.subject, body, _headers(envelope)))
    results = await asyncio.gather(*waits, return_exceptions=True)
    acks: list[PubAck] = []
    for envelope, result in zip(chunk, results, strict=True):
        if isinstance(result, PubAck):
            acks.append(result)
        elif isinstance(result, TaskqError):
            # ack lost or refused for a moment: publish again (same subject, so the same
            # stream's dedup window keeps it single)
            acks.append(await _republish(client, envelope))
        else:
            raise result
    return acks


async def _republish(client: Client, envelope: Envelope) -> PubAck:
    body, headers = envelope.encode(), _headers(envelope)
    return await retry_transient(
        lambda: client.connection.publish(envelope.subject, body, headers), what="enqueue"
    )
