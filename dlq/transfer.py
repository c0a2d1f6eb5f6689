"""Export and import of dead letters as JSON lines, byte-exact.

Each line holds one DLQ message exactly as stored (subject, headers, body in base64) and,
when the record keeps its original in the object store, that blob too. Importing publishes
the same messages again; their `Nats-Msg-Id` makes a repeated import within the dedup window
a no-op.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from taskq.client import Client, ClientSource
from taskq.dlq.browse import Filters, iter_stored
from taskq.dlq.record import BlobOriginal, DeadLetter
from taskq.errors import TaskqError

FORMAT = 1


class ImportFormatError(TaskqError, ValueError):
    """A line of an import file is not an exported dead letter."""

    def __init__(self, line: int, reason: str) -> None:
        """`line`: its number in the file (from 1); `reason`: what is wrong with it."""
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")


async def export_lines(source: ClientSource, filters: Filters | None = None) -> AsyncIterator[str]:
    """One JSON line per matching dead letter, oldest first."""
    client = await source.client()
    async for stored, record in iter_stored(client, filters):
        line: dict[str, Any] = {
            "v": FORMAT,
            "subject": stored.subject,
            "headers": stored.headers,
            "data_b64": base64.b64encode(stored.data).decode(),
        }
        if isinstance(record.message, BlobOriginal):
            bucket = client.names.blobs_bucket
            blob = await client.connection.blobs.get(bucket, record.message.blob)
            if blob is not None:
                line["blob_b64"] = base64.b64encode(blob).decode()
        yield json.dumps(line, separators=(",", ":"))


def parse_line(number: int, text: str) -> dict[str, Any]:
    """Line `number` of an import file, checked; ImportFormatError says what is wrong."""
    try:
        line = json.loads(text)
        if not isinstance(line, dict) or line.get("v") != FORMAT:
            raise ValueError(f"not an export line of format {FORMAT}")
        DeadLetter.model_validate_json(base64.b64decode(line["data_b64"], validate=True))
        if not isinstance(line["subject"], str) or not isinstance(line["headers"], dict):
            raise ValueError("subject or headers missing")
    except (ValueError, KeyError, TypeError) as exc:  # pydantic's ValidationError included
        raise ImportFormatError(number, str(exc)) from None
    return line


async def import_lines(source: ClientSource, lines: Iterable[str]) -> int:
    """Publish exported dead letters back into this app's DLQ; returns how many were new."""
    parsed = [parse_line(i, t) for i, t in enumerate(lines, 1) if t.strip()]
    client = await source.client()
    from taskq.dlq.setup import ensure_dlq

    await ensure_dlq(client)
    added = 0
    for line in parsed:
        added += await _import_one(client, line)
    return added


async def _import_one(client: Client, line: dict[str, Any]) -> int:
    """Publish one parsed export line (its blob first); 1 if it was new, 0 if a duplicate."""
    data = base64.b64decode(line["data_b64"])
    record = DeadLetter.model_validate_json(data)
    if "blob_b64" in line and isinstance(record.message, BlobOriginal):
        await client.connection.blobs.put(
            client.names.blobs_bucket,
            record.message.blob,
            base64.b64decode(line["blob_b64"]),
            client.settings.replicas,
        )
    subject = _rebase(line["subject"], client.names.prefix)
    headers = {str(k): str(v) for k, v in line["headers"].items()}
    ack = await client.connection.publish(subject, data, headers)
    return 0 if ack.duplicate else 1


def _rebase(subject: str, prefix: str) -> str:
    """Move `<old prefix>.dlq.…` under this app's prefix (exports can move between apps)."""
    _, sep, rest = subject.partition(".dlq.")
    return f"{prefix}.dlq.{rest}" if sep else subject
