"""`/history`: what settled over the last hour or day — for all queues, one queue
(`?queue=Q`) or one task name (`?task=NAME`, the task's own page) — as charts, and as
JSON at `/api/history` (a list of windows). The overview and queue pages show the same
charts for their scope (`charts_for`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from taskq.client import Client
from taskq.dashboard.charts import Charts, charts
from taskq.dashboard.render import respond
from taskq.dashboard.shared import client_of
from taskq.dlq.browse import Filters
from taskq.dlq.pages import page as dead_page
from taskq.operate.history import history
from taskq.records.heartbeats import list_workers

RECENT = 10  # a task's dead letters shown on its page


async def history_page(request: Request) -> Response:
    """The charts of one scope over `span` (1h or 24h); JSON: every window of the span."""
    client, query = client_of(request), request.query_params
    queue, task = query.get("queue") or None, query.get("task") or None
    span = query.get("span") or "1h"
    windows = await history(client, queue=queue, task=task, span=span)
    failures = []
    if task is not None:  # the task's own page: its last dead letters too
        failures = (await dead_page(client, Filters(task=task), limit=RECENT)).records
    title = f"Task {task}" if task else f"Queue {queue}" if queue else "All queues"
    return respond(
        request,
        "history.html",
        [w.to_dict() for w in windows],
        title=f"History: {title}",
        heading=title,
        queue=queue,
        task=task,
        span=span,
        charts=charts(windows),
        failures=failures,
    )


async def charts_for(client: Client, queue: str | None = None) -> Charts:
    """The last hour's charts of `queue` (None: every queue), for the overview and queue pages."""
    return charts(await history(client, queue=queue))


async def task_names(client: Client, queue: str) -> list[str]:
    """The task names the live workers of `queue` run (each links to its history page)."""
    names = {
        name
        for worker in await list_workers(client)
        for entry in worker.tasks
        for q, _, name in [entry.partition(":")]
        if q == queue and name
    }
    return sorted(names)
