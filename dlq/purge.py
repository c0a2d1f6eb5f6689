"""Purge: delete dead letters for good (and any original kept in the object store)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from dlq.record import DeadLetter
from taskq.app import App

CHUNK = 256


async def purge_all(app: App) -> int:
    """Empty the whole DLQ stream in one request; returns how many records went."""
    broker = await app.broker()
    return await broker.purge_stream(app.names.dlq_stream)


async def purge(app: App, records: Iterable[DeadLetter]) -> int:
    """Delete the given records; returns how many were deleted."""
    broker = await app.broker()
    doomed = list(records)
    deleted = 0
    for start in range(0, len(doomed), CHUNK):
        chunk = doomed[start : start + CHUNK]
        results = await asyncio.gather(
            *(broker.delete_msg(app.names.dlq_stream, r.seq) for r in chunk)
        )
        deleted += sum(1 for ok in results if ok)
        for record in chunk:
            if "blob" in record.message:
                await broker.delete_blob(app.names.blobs_bucket, str(record.message["blob"]))
    return deleted
