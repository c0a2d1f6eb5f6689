"""Dead letters too large for one message keep their original in the object store.

A task message can be as large as the server's `max_payload`; its dead-letter record adds
the error and (for undecodable bytes) base64, so it may not fit. Rather than truncate (and
lose the task), the original bytes go to the `<PREFIX>_BLOBS` object store and the record's
`message` becomes a reference: `{"blob": name, "size": n, "id": ..., "task": ...}`.
"""

from __future__ import annotations

import base64
import json

from dlq.record import DeadLetter
from taskq.app import App
from taskq.jetstream import Broker
from taskq.names import Names

# room for the subject, headers and protocol framing around the record body
HEADROOM = 1024


def blob_name(record: DeadLetter) -> str:
    return f"dlq.{record.queue}.{record.original_seq}.{record.id}"


async def fit(broker: Broker, names: Names, record: DeadLetter, raw: bytes | None) -> DeadLetter:
    """`record` itself if it fits in one message, else a copy whose original is a blob."""
    if len(record.body()) + HEADROOM <= broker.max_payload:
        return record
    original = raw if raw is not None else json.dumps(record.message).encode()
    name = blob_name(record)
    await broker.put_blob(names.blobs_bucket, name, original, broker.settings.replicas)
    reference = {"blob": name, "size": len(original), "id": record.id, "task": record.task}
    error = record.error.model_copy(update={"traceback": record.error.traceback[-20_000:]})
    return record.model_copy(update={"message": reference, "error": error})


async def original_bytes(app: App, record: DeadLetter) -> bytes:
    """The original task message's bytes, wherever the record keeps them."""
    message = record.message
    if "blob" in message:
        broker = await app.broker()
        data = await broker.get_blob(app.names.blobs_bucket, str(message["blob"]))
        if data is None:
            raise LookupError(f"dead letter {record.id}: blob {message['blob']} is missing")
        return data
    if "raw_b64" in message:
        return base64.b64decode(str(message["raw_b64"]))
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
