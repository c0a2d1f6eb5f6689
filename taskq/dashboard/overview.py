"""The overview (`/`: every queue and the workers, live), `/workers`, and `/go` (the
search box: a task, workflow or run id)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from taskq.dashboard.history import charts_for
from taskq.dashboard.live import event_stream, queue_events, queues_of
from taskq.dashboard.render import respond
from taskq.dashboard.shared import client_of, url
from taskq.dashboard.tasks import is_run
from taskq.operate.queue_stats import snapshot
from taskq.records.clock import format_epoch
from taskq.records.heartbeats import list_workers
from taskq.records.relays import list_relays


async def overview(request: Request) -> Response:
    """Every queue (waiting, in flight, redelivered, dead, paused, rates) and worker."""
    client = client_of(request)
    stats = await snapshot(client, None, 0)
    workers = await list_workers(client)
    relays = await list_relays(client)  # outbox relays, when any reports (docs/outbox.md)
    history = await charts_for(client)  # every queue's last hour, kept by the server
    data = {
        "queues": [s.to_dict() for s in stats],
        "workers": [w.to_dict() for w in workers],
        "outbox": [r.to_dict() for r in relays],
        "history": history.total.to_dict() | {"start": format_epoch(history.first)},
    }
    return respond(
        request,
        "overview.html",
        data,
        title="Overview",
        queues=stats,
        workers=workers,
        relays=relays,
        history=history,
        events="/events/queues",
    )


async def workers(request: Request) -> Response:
    """Every live worker and the tasks each is running."""
    found = await list_workers(client_of(request))
    return respond(
        request,
        "workers.html",
        [w.to_dict() for w in found],
        title="Workers",
        workers=found,
        events="/events/queues",
    )


async def queue_stream(request: Request) -> Response:
    """GET /events/queues[?queue=Q...]: the `stats` events of the overview."""
    return event_stream(request, queue_events(client_of(request), queues_of(request)))


async def go(request: Request) -> Response:
    """The search box: a durable workflow run's id goes to its page; any other id to the
    task page (which sends a chain, group or chord's id on to the workflow's page)."""
    wanted = request.query_params.get("id", "").strip()
    if not wanted:
        return RedirectResponse("/", status_code=303)
    if await is_run(client_of(request), wanted):
        return RedirectResponse(url("workflows", wanted), status_code=303)
    return RedirectResponse(url("tasks", wanted), status_code=303)
