"""`/queues/<queue>`: one queue's tasks by name, its controls (pause, resume, purge with
confirmation) and its recent failures."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from taskq.dashboard.forms import duration, text
from taskq.dashboard.gate import checked_form
from taskq.dashboard.history import charts_for, task_names
from taskq.dashboard.render import ask, done, respond
from taskq.dashboard.shared import client_of, param, url
from taskq.dlq.browse import Filters
from taskq.dlq.pages import page as dead_page
from taskq.operate.queue_control import (
    pause_queue,
    purge_queue,
    queue_parts,
    resume_queue,
    stored_tasks,
)
from taskq.operate.queue_stats import queue_stats

RECENT = 10  # dead letters shown as the queue's recent failures


async def queue_page(request: Request) -> Response:
    """One queue: its figures (live), per task counts, controls, recent failures."""
    client, queue = client_of(request), param(request, "queue")
    stats = await queue_stats(client, queue, await queue_parts(client, queue))
    failures = (await dead_page(client, Filters(queue=queue), limit=RECENT)).records
    history = await charts_for(client, queue)
    data = {"queue": stats.to_dict(), "recent_failures": [r.to_dict() for r in failures]}
    return respond(
        request,
        "queue.html",
        data,
        title=f"Queue {queue}",
        stats=stats,
        failures=failures,
        history=history,
        names=sorted(set(stats.per_task) | set(await task_names(client, queue))),
        events=f"/events/queues?queue={queue}",
    )


async def pause(request: Request) -> Response:
    """POST: pause the queue until resumed, or for the `for` duration."""
    form = await checked_form(request)
    queue = param(request, "queue")
    state = await pause_queue(client_of(request), queue, for_=duration(text(form, "for"), "for"))
    return done(request, url("queues", queue), "paused", state.to_dict())


async def resume(request: Request) -> Response:
    """POST: let workers receive the queue's tasks again."""
    await checked_form(request)
    queue = param(request, "queue")
    state = await resume_queue(client_of(request), queue)
    return done(request, url("queues", queue), "resumed", state.to_dict())


async def purge(request: Request) -> Response:
    """POST: remove the queue's stored tasks (one task's with `task`), once confirmed
    (`confirm=yes`; without it, the page asks, showing how many would go)."""
    form = await checked_form(request)
    client, queue, task = client_of(request), param(request, "queue"), text(form, "task")
    which = f"task {task} of queue {queue}" if task else f"queue {queue}"
    if text(form, "confirm") != "yes":
        count = await stored_tasks(client, queue, task)
        return ask(
            request,
            f"Remove the {count} stored task(s) of {which}?",
            "Delayed and periodic tasks are schedules and stay. A task running now "
            "finishes, but a retry it asks for will not happen.",
            {"task": task or ""},
            count,
            url("queues", queue),
        )
    purged = await purge_queue(client, queue, task)
    result = {"queue": queue, "task": task, "purged": purged}
    return done(request, url("queues", queue), "purged", result, n=purged)
