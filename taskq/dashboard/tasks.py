"""`/tasks`: recent tasks, newest first, filtered and paged; `/tasks/<id>`: a task's whole
story, live while it runs, with cancel and (when dead) requeue (a workflow's id leads to
its page, taskq/dashboard/runs.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from taskq.client import Client
from taskq.dashboard.config import DashboardError
from taskq.dashboard.forms import cursor, task_fields, task_filters
from taskq.dashboard.gate import checked_form
from taskq.dashboard.live import event_stream, task_events
from taskq.dashboard.render import API, done, respond, wants_json
from taskq.dashboard.shared import client_of, link, param, url
from taskq.dlq.browse import get_dead
from taskq.dlq.requeue import requeue
from taskq.errors import PermissionDenied
from taskq.operate.story import story
from taskq.operate.task_list import STATES, recent
from taskq.records.cancels import cancel
from taskq.records.results import FINAL
from taskq.topology.partitions import queues_on_server
from taskq.workflows.store import load_summary
from taskq.workflows.story import workflow_id_of, workflow_story

LIST_PAGE = 50  # tasks a page of the task list shows


async def task_list(request: Request) -> Response:
    """Recent tasks, newest first, with the filters and the cursors."""
    client, query = client_of(request), request.query_params
    before, after = cursor(query, "before"), cursor(query, "after")
    found = await recent(client, task_filters(query), limit=LIST_PAGE, before=before, after=after)
    fields = task_fields(query)
    return respond(
        request,
        "tasks.html",
        found.to_dict(),
        title="Tasks",
        found=found,
        fields=fields,
        states=STATES,
        queues=sorted(await queues_on_server(client.connection, client.names)),
        older=link("/tasks", fields, before=found.older) if found.older else "",
        newer=link("/tasks", fields, after=found.newer) if found.newer else "",
        newest=link("/tasks", fields) if before or after else "",
    )


async def task_page(request: Request) -> Response:
    """A task's story; a workflow's id leads to the workflow's page."""
    client, task_id = client_of(request), param(request, "task_id")
    told = await story(client, task_id)
    if told is None:
        if await workflow_story(client, task_id) is not None:
            where = url("workflows", task_id)
            return RedirectResponse(API + where if wants_json(request) else where, 303)
        search = (link("/tasks", {"id": task_id}), f"List tasks whose id starts with {task_id}")
        raise DashboardError(
            404, f"no task {task_id!r}: nothing waits, runs or recorded it", see=search
        )
    live = told.state not in FINAL
    workflow = _workflow_of(told.id, told.workflow)
    if workflow is None and await is_run(client, task_id):
        workflow = task_id  # the record a durable run ends with, under the run's id
    return respond(
        request,
        "task.html",
        told.to_dict(),
        title=f"{told.task or 'Task'} {task_id}",
        told=told,
        workflow=workflow,
        events=url("events", "tasks", task_id) if live else "",
    )


async def is_run(client: Client, ref: str) -> bool:
    """Whether `ref` is a durable workflow run's id (it has a summary). A NATS user that
    may not read the runs bucket sees none: the page it asked for is shown without them."""
    try:
        return await load_summary(client, ref) is not None
    except PermissionDenied:
        return False


def _workflow_of(task_id: str, final: str | None) -> str | None:
    """The workflow a task belongs to: named by its record, or by its id's shape
    (`<flow>.<n>`, `<flow>.cb`: the final step's record names no other task)."""
    flow = workflow_id_of(final or task_id)
    return flow if flow != (final or task_id) or final else None


async def cancel_task(request: Request) -> Response:
    """POST: cancel the task wherever it is (waiting: never runs; running: stopped)."""
    await checked_form(request)
    task_id = param(request, "task_id")
    report = await cancel(client_of(request), task_id)
    return done(request, url("tasks", task_id), report.outcome, report.to_dict())


async def requeue_task(request: Request) -> Response:
    """POST: send a dead task back to its queue (its dead letter, requeued)."""
    await checked_form(request)
    client, task_id = client_of(request), param(request, "task_id")
    told = await story(client, task_id)
    letter = told.dead_letter if told is not None else None
    record = await get_dead(client, str(letter.get("seq"))) if letter else None
    if record is None:
        raise DashboardError(409, f"task {task_id!r} has no dead letter to requeue")
    result = await requeue(client, [record])
    if result.failed:
        raise DashboardError(502, f"not requeued: {result.failed[0][1]}")
    body = {"requeued": result.requeued, "failed": result.failed}
    return done(request, url("tasks", task_id), "requeued", body, n=result.requeued)


async def task_stream(request: Request) -> Response:
    """GET /events/tasks/<id>: `state`, `progress`, then `final` events."""
    return event_stream(request, task_events(client_of(request), param(request, "task_id")))
