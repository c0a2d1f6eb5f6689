"""Purge: delete dead letters for good (and any original kept in the object store)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from taskq.client import ClientSource
from taskq.dlq.oversize import discard_blob
from taskq.dlq.record import DeadLetter

CHUNK = 256


async def purge_all(source: ClientSource) -> int:
    """Empty the whole DLQ stream in one request; returns how many records went."""
    client = await source.client()
    return await client.connection.messages.purge(client.names.dlq_stream)


async def purge(
    source: ClientSource,
    records: Iterable[DeadLetter],
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete the given records; returns how many were deleted. `progress(n)` is called
    after each chunk with the number of records it handled."""
    client = await source.client()
    stream = client.names.dlq_stream
    doomed = list(records)
    deleted = 0
    for start in range(0, len(doomed), CHUNK):
        chunk = doomed[start : start + CHUNK]
        results = await asyncio.gather(
            *(client.connection.messages.delete(stream, r.seq) for r in chunk)
        )
        deleted += sum(1 for ok in results if ok)
        for record in chunk:
            await discard_blob(client, record)
        if progress:
            progress(len(chunk))
    return deleted
