"""Export and import of dead letters as JSON lines, byte-exact.

Each line holds one DLQ message exactly as stored (subject, headers, body in base64) and,
when the record keeps its original in the object store, that blob too. Importing publishes
the same messages again; their `Nats-Msg-Id` makes a repeated import within the dedup window
a no-op.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from taskq.client import Client, ClientSource
from taskq.dlq.browse import Filters, iter_stored, log
from taskq.dlq.record import BlobOriginal, DeadLetter, SealedOriginal
from taskq.dlq.stream import ensure_dlq
from taskq.errors import TaskqError

FORMAT = 1


class ImportFormatError(TaskqError, ValueError):
    """A line of an import file is not an exported dead letter."""

    def __init__(self, line: int, reason: str) -> None:
        """`line`: its number in the file (from 1); `reason`: what is wrong with it."""
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")


async def export_lines(
    source: ClientSource,
    filters: Filters | None = None,
    progress: Callable[[int], None] | None = None,
) -> AsyncIterator[str]:
    """One JSON line per matching dead letter, oldest first (`progress` as for
    `iter_stored`: one per message read)."""
    client = await source.client()
    async for stored, record in iter_stored(client, filters, progress):
        if isinstance(record.message, SealedOriginal):  # an import could not check it
            log.warning("DLQ message %d not exported: %s", stored.seq, record.message.sealed)
            continue
        line: dict[str, Any] = {
            "v": FORMAT,
            "subject": stored.subject,
            "headers": stored.headers,
            "data_b64": base64.b64encode(stored.data).decode(),
        }
        if isinstance(record.message, BlobOriginal):
            bucket = client.names.blobs_bucket
            blob = await client.codec.get_object(bucket, record.message.blob)
            if blob is not None:
                line["blob_b64"] = base64.b64encode(blob).decode()
        yield json.dumps(line, separators=(",", ":"))


@dataclass(frozen=True)
class ExportLine:
    """One checked line of an export file: the DLQ message and its record, decoded once."""

    subject: str
    headers: dict[str, str]
    data: bytes
    record: DeadLetter
    blob: bytes | None


def parse_line(number: int, text: str) -> ExportLine:
    """Line `number` of an import file, checked; ImportFormatError says what is wrong."""
    try:
        line = json.loads(text)
        if not isinstance(line, dict) or line.get("v") != FORMAT:
            raise ValueError(f"not an export line of format {FORMAT}")
        data = base64.b64decode(line["data_b64"], validate=True)
        record = DeadLetter.model_validate_json(data)
        if not isinstance(line["subject"], str) or not isinstance(line["headers"], dict):
            raise ValueError("subject or headers missing")
        blob = base64.b64decode(line["blob_b64"]) if "blob_b64" in line else None
    except (ValueError, KeyError, TypeError) as exc:  # pydantic's ValidationError included
        raise ImportFormatError(number, str(exc)) from None
    headers = {str(k): str(v) for k, v in line["headers"].items()}
    return ExportLine(line["subject"], headers, data, record, blob)


def parse_lines(lines: Iterable[str]) -> list[ExportLine]:
    """Every non-blank line of an import file, checked before anything is published."""
    return [parse_line(i, t) for i, t in enumerate(lines, 1) if t.strip()]


async def import_lines(source: ClientSource, lines: Iterable[str]) -> int:
    """Publish exported dead letters back into this app's DLQ; returns how many were new.
    Every line is checked first: a bad one publishes nothing."""
    return await import_parsed(source, parse_lines(lines))


async def import_parsed(
    source: ClientSource,
    parsed: list[ExportLine],
    progress: Callable[[int], None] | None = None,
) -> int:
    """`import_lines` for lines already checked with `parse_lines`; `progress(1)` per line."""
    client = await source.client()
    await ensure_dlq(client)
    added = 0
    for line in parsed:
        added += await _import_one(client, line)
        if progress:
            progress(1)
    return added


async def _import_one(client: Client, line: ExportLine) -> int:
    """Publish one checked export line (its blob first); 1 if it was new, 0 if a duplicate."""
    if line.blob is not None and isinstance(line.record.message, BlobOriginal):
        await client.codec.put_object(
            client.names.blobs_bucket,
            line.record.message.blob,
            line.blob,
            client.settings.replicas,
        )
    subject = _rebase(line.subject, client.names.prefix)
    ack = await client.connection.publish(subject, line.data, line.headers)
    return 0 if ack.duplicate else 1


def _rebase(subject: str, prefix: str) -> str:
    """Move `<old prefix>.dlq.…` under this app's prefix (exports can move between apps)."""
    _, sep, rest = subject.partition(".dlq.")
    return f"{prefix}.dlq.{rest}" if sep else subject
