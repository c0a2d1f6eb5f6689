"""Live parts of pages, as server-sent events: the queues' counts and rates with the
workers (overview, queue page), a task's state and progress (task page), and a durable
workflow run's state and journal (run page).

Each stream reads the server on its own, as often as it sends, and keeps only what it
needs to tell a change (the last value sent): the dashboard keeps no history. The 15
minutes behind a sparkline are kept by the browser from these events.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from taskq.client import Client
from taskq.errors import TaskqError
from taskq.operate.queue_stats import snapshot
from taskq.records.clock import now_iso
from taskq.records.heartbeats import list_workers, running_on
from taskq.records.progress import latest
from taskq.records.results import FINAL, fetch
from taskq.workflows.store import FINAL as RUN_FINAL
from taskq.workflows.store import load_summary
from taskq.workflows.views import journal_last

Event = tuple[str, Any]
INTERVAL = 2.0  # seconds between two readings of the queues: their rates' interval
TASK_POLL = 0.5  # seconds between two readings of a task's record and progress
RUN_POLL = 0.5  # seconds between two readings of a run's summary and journal


def event_stream(request: Request, events: AsyncIterator[Event]) -> Response:
    """`events` as a text/event-stream response: it ends when the browser goes away, or
    when the dashboard stops (`app.state.stopping`)."""
    stopping: asyncio.Event = request.app.state.stopping

    async def body() -> AsyncIterator[str]:
        yield "retry: 3000\n\n"  # reconnect after 3 s if the stream breaks
        async for name, data in _until(events, stopping):
            yield f"event: {name}\ndata: {json.dumps(data, default=repr)}\n\n"

    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


async def _until(events: AsyncIterator[Event], stopping: asyncio.Event) -> AsyncIterator[Event]:
    """`events` until `stopping` is set: a stream ends at once when the dashboard stops,
    rather than being cancelled (with a traceback in the log) at the end of its grace."""
    stop = asyncio.ensure_future(stopping.wait())
    try:
        while True:
            following = asyncio.ensure_future(anext(events))
            await asyncio.wait((following, stop), return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                following.cancel()
                return
            try:
                yield following.result()
            except StopAsyncIteration:
                return
    finally:
        stop.cancel()


async def queue_events(client: Client, queues: list[str] | None) -> AsyncIterator[Event]:
    """`stats` events: every queue's figures (rates over INTERVAL) and the live workers.
    The first comes at once (without rates), then one per INTERVAL."""
    interval, workers, read_at = 0.0, [], -math.inf
    while True:
        try:
            stats = await snapshot(client, queues, interval)
            # the worker heartbeats change once an interval, and each read of it is a consumer
            if time.monotonic() - read_at >= client.settings.heartbeat:
                workers, read_at = await list_workers(client), time.monotonic()
        except TaskqError as exc:  # the server may come back: say so and go on trying
            yield "problem", {"error": str(exc)}
            await asyncio.sleep(INTERVAL)
            continue
        yield (
            "stats",
            {
                "at": now_iso(),
                "rates": interval > 0,
                "queues": [s.to_dict() for s in stats],
                "workers": [w.to_dict() for w in workers],
            },
        )
        interval = INTERVAL


async def task_events(client: Client, task_id: str) -> AsyncIterator[Event]:
    """`progress` and `state` events as they change, then `final` (and the stream ends)
    once the task succeeded, died or was cancelled. A task with no record that no worker
    runs gets no `state`: the page's own (queued, delayed, held) stands."""
    sent: dict[str, Any] = {}
    beat, running = 0, False
    every = max(1, round(client.settings.heartbeat / TASK_POLL))
    while True:
        record = await fetch(client, task_id)
        state = record.state if record is not None else None
        if state in FINAL:
            yield "final", {"state": state}
            return
        if beat % every == 0:  # the worker heartbeats change once an interval
            running = bool(await running_on(client, task_id))
        state = "running" if running else state
        report = await latest(client, task_id)
        progress = report.model_dump() if report is not None else None
        told = {"state": state} if state is not None else None
        for name, value in (("state", told), ("progress", progress)):
            if value is not None and sent.get(name) != value:
                sent[name] = value
                yield name, value
        beat += 1
        await asyncio.sleep(TASK_POLL)


async def run_events(client: Client, run_id: str, shown: tuple[str, int]) -> AsyncIterator[Event]:
    """`run` events (`state`, `last`: the journal's last sequence, `final`) whenever the
    run's state or journal differs from what was last shown (`shown`, the page's own at
    first); the stream ends after the one whose state is final. Two small reads a poll: the
    summary, and the last message of each journal subject."""
    sent = {"state": shown[0], "last": shown[1]}
    while True:
        try:
            last = await journal_last(client, run_id)  # first: a later change is seen next
            summary = await load_summary(client, run_id)
        except TaskqError as exc:  # the server may come back: say so and go on trying
            yield "problem", {"error": str(exc)}
            await asyncio.sleep(INTERVAL)
            continue
        now = {"state": summary.state if summary else sent["state"], "last": last}
        final = now["state"] in RUN_FINAL
        if now != sent or final:
            sent = now
            yield "run", {**now, "final": final}
        if final:
            return
        await asyncio.sleep(RUN_POLL)


def queues_of(request: Request) -> list[str] | None:
    """The `queue` parameters of an events URL (none: every queue)."""
    return request.query_params.getlist("queue") or None
