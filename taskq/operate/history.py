"""Reading the history (taskq.records.history): the windows of the last hour or day for all
queues, one queue or one task name, oldest first, every window of the span listed (a window
nothing settled in has zero counts and no run times) — `taskq history`, `/api/history` and
the dashboard's charts."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from taskq.client import Client, ClientSource
from taskq.errors import ConfigError
from taskq.nats import StoredMessage
from taskq.records.history import RESOLUTIONS, SPANS, Window, decode
from taskq.topology.names import check_queue, check_task

READ_AT_MOST = 1024  # stored windows read for one series (a span has at most 361)


def series_of(queue: str | None, task: str | None) -> str:
    """The series a query reads: one task name, one queue, or all queues (neither)."""
    if queue and task:
        raise ConfigError("history: give a queue or a task name, not both")
    if task:
        return f"t.{check_task(task)}"
    return f"q.{check_queue(queue)}" if queue else "a"


async def history(
    source: ClientSource, *, queue: str | None = None, task: str | None = None, span: str = "1h"
) -> list[Window]:
    """The windows of the last `span` (`1h`: 10-second windows, `24h`: 5-minute ones) for
    `queue`, for the task named `task`, or for all queues (an App or a Client)."""
    resolution = SPANS.get(span)
    if resolution is None:
        raise ConfigError(f"history span {span[:20]!r}: use one of {', '.join(SPANS)}")
    length, kept = RESOLUTIONS[resolution]
    series = series_of(queue, task)
    client = await source.client()
    now = time.time()
    first, last = int((now - kept) // length), int(now // length)
    stored = await _stored(
        client, client.names.history_subject(resolution, series, "*"), now - kept
    )
    found: dict[int, Window] = {}
    for message in stored:
        window = decode(message.data, length)
        if window is not None and first <= window.start // length <= last:
            found[window.start // length] = window
    return [found.get(i) or Window(i * length, length) for i in range(first, last + 1)]


async def _stored(client: Client, subjects: str, since: float) -> list[StoredMessage]:
    """The last message of every subject matching `subjects`: one batched direct get; read in
    stream order from `since` when more subjects match than one get answers (a writer that
    stored windows it should not have), at most READ_AT_MOST of them."""
    messages, stream = client.connection.messages, client.names.history_stream
    found = await messages.lasts(stream, subjects)
    if found is not None:
        return found
    start = await messages.first_seq_at(stream, datetime.fromtimestamp(since, UTC))
    if start is None:
        return []
    return await messages.batch(stream, start, READ_AT_MOST, subjects)
