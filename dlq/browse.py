"""Reading the dead-letter stream: list and fetch records without consuming them."""

from __future__ import annotations

from dlq.record import DeadLetter
from taskq.app import App
from taskq.jetstream import StoredMessage


def parse(stored: StoredMessage) -> DeadLetter:
    record = DeadLetter.model_validate_json(stored.data)
    return record.model_copy(update={"seq": stored.seq})


async def list_dead(app: App, limit: int | None = None) -> list[DeadLetter]:
    """Dead letters in the DLQ stream, oldest first (direct gets: nothing is consumed)."""
    broker = await app.broker()
    stream = app.names.dlq_stream
    records: list[DeadLetter] = []
    seq = 1
    while limit is None or len(records) < limit:
        stored = await broker.next_msg(stream, seq)
        if stored is None:
            break
        records.append(parse(stored))
        seq = stored.seq + 1
    return records
