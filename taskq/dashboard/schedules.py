"""`/schedules`: delayed and periodic tasks (server-side message schedules) with their next
run, and removing one (confirmed first)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from taskq.dashboard.config import DashboardError
from taskq.dashboard.forms import text
from taskq.dashboard.gate import checked_form
from taskq.dashboard.render import ask, done, respond
from taskq.dashboard.shared import client_of
from taskq.records.schedules import PERIODIC, list_schedules, remove, users


async def schedules_page(request: Request) -> Response:
    """Every user's schedule of every queue (`?all=1`: taskq's own too), soonest first."""
    everything = request.query_params.get("all") == "1"
    found = users(await list_schedules(client_of(request)), everything)
    found.sort(key=lambda s: (s.next_run or "~", s.queue, s.name))
    return respond(
        request,
        "schedules.html",
        [vars(s) for s in found],
        title="Schedules",
        schedules=found,
        periodic=PERIODIC + ".",
    )


async def remove_schedule(request: Request) -> Response:
    """POST (queue, name): cancel a schedule, once confirmed."""
    form = await checked_form(request)
    queue, name = text(form, "queue"), text(form, "name")
    if not queue or not name:
        raise DashboardError(400, "give the schedule's queue and name")
    if text(form, "confirm") != "yes":
        kind = "periodic task" if name.startswith(PERIODIC + ".") else "delayed task"
        detail = (
            "A worker declaring it registers a periodic task again when it starts."
            if kind == "periodic task"
            else "The delayed task will never run."
        )
        question = f"Remove the schedule of {kind} {name} (queue {queue})?"
        return ask(request, question, detail, {"queue": queue, "name": name}, 1, "/schedules")
    if not await remove(client_of(request), queue, name):
        raise DashboardError(404, f"no schedule {name!r} in queue {queue!r}")
    return done(request, "/schedules", "removed", {"queue": queue, "name": name, "removed": True})
