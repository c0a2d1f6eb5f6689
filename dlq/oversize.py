"""Dead letters too large for one message keep their original in the object store.

A task message can be as large as the server's `max_payload`; its dead-letter record adds
the error and (for undecodable bytes) base64, so it may not fit. Rather than truncate (and
lose the task), the original bytes go to the `<PREFIX>_BLOBS` object store and the record's
`message` becomes a reference, a `BlobOriginal`:
`{"blob": name, "size": n, "id": ..., "task": ...}`.
"""

from __future__ import annotations

import json

from taskq.client import ClientSource
from taskq.dlq.record import BlobOriginal, DeadLetter, RawOriginal, SealedOriginal
from taskq.errors import DecodeError
from taskq.ids import safe_id

# room for the subject, headers and protocol framing around the record body
HEADROOM = 1024


def blob_name(record: DeadLetter) -> str:
    """The object-store name of a record's original (unique per task id and original seq)."""
    return f"dlq.{record.queue}.{record.original_seq}.{safe_id(record.id)}"


async def fit(source: ClientSource, record: DeadLetter, raw: bytes | None) -> DeadLetter:
    """`record` itself if it fits in one message, else a copy whose original is a blob."""
    client = await source.client()
    connection = client.connection
    if len(record.body()) + HEADROOM <= connection.max_payload:
        return record
    original = raw if raw is not None else json.dumps(record.message.model_dump()).encode()
    name = blob_name(record)
    await connection.blobs.put(client.names.blobs_bucket, name, original, client.settings.replicas)
    reference = BlobOriginal(blob=name, size=len(original), id=record.id, task=record.task)
    error = record.error.model_copy(update={"traceback": record.error.traceback[-20_000:]})
    return record.model_copy(update={"message": reference, "error": error})


async def original_bytes(source: ClientSource, record: DeadLetter) -> bytes:
    """The original task message's bytes, wherever the record keeps them."""
    message = record.message
    if isinstance(message, BlobOriginal):
        client = await source.client()
        data = await client.connection.blobs.get(client.names.blobs_bucket, message.blob)
        if data is None:
            raise LookupError(f"dead letter {record.id}: blob {message.blob} is missing")
        return data
    if isinstance(message, RawOriginal):
        decoded: bytes = message.decoded()
        return decoded
    if isinstance(message, SealedOriginal):  # its original is inside the sealed body
        raise DecodeError(f"dead letter {record.id}: {message.sealed}")
    return json.dumps(message.model_dump(), separators=(",", ":"), ensure_ascii=False).encode()


async def discard_blob(source: ClientSource, record: DeadLetter) -> None:
    """Delete the object-store copy of a record's original, if it has one."""
    if isinstance(record.message, BlobOriginal):
        client = await source.client()
        await client.connection.blobs.delete(client.names.blobs_bucket, record.message.blob)
