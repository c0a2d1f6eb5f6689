"""The dashboard's web application: its routes (pages, their JSON twins under `/api`,
actions, live events, static assets) and how errors are answered."""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from taskq.client import Client
from taskq.dashboard import dead, history, overview, queues, runs, schedules, tasks
from taskq.dashboard.config import DashboardConfig, DashboardError
from taskq.dashboard.gate import Gate, login, login_form, refuse
from taskq.dashboard.render import API, environment
from taskq.errors import (
    ConfigError,
    ConnectError,
    NotFound,
    PermissionDenied,
    RunEnded,
    TaskqError,
    TransientError,
    ValidationError,
)

# Pages (GET) and actions (POST): served at these paths and, as JSON, under /api.
PAGES = (
    ("/", overview.overview),
    ("/workers", overview.workers),
    ("/tasks", tasks.task_list),
    ("/queues/{queue}", queues.queue_page),
    ("/tasks/{task_id:path}", tasks.task_page),
    ("/workflows", runs.runs_list),
    ("/workflows/{flow_id:path}", runs.workflow_page),
    ("/dlq", dead.dlq_page),
    ("/dlq/{seq:int}", dead.record_page),
    ("/schedules", schedules.schedules_page),
    ("/history", history.history_page),
)
ACTIONS = (
    ("/queues/{queue}/pause", queues.pause),
    ("/queues/{queue}/resume", queues.resume),
    ("/queues/{queue}/purge", queues.purge),
    ("/tasks/{task_id:path}/cancel", tasks.cancel_task),
    ("/tasks/{task_id:path}/requeue", tasks.requeue_task),
    ("/dlq/requeue", dead.requeue_matching),
    ("/dlq/purge", dead.purge_matching),
    ("/dlq/{seq:int}/requeue", dead.requeue_one),
    ("/dlq/{seq:int}/purge", dead.purge_one),
    ("/schedules/remove", schedules.remove_schedule),
    ("/workflows/{run_id:path}/signal", runs.signal),
    ("/workflows/{run_id:path}/cancel", runs.cancel),
    ("/workflows/{run_id:path}/retry", runs.retry),
)


def routes() -> list[BaseRoute]:
    """Every route; actions first, so that `/tasks/<id>/cancel` (or
    `/workflows/<id>/signal`) is never read as an id."""
    twins: list[BaseRoute] = [Route(p, h, methods=["POST"]) for p, h in ACTIONS]
    twins += [Route(p, h, methods=["GET"]) for p, h in PAGES]
    return [
        Route("/dlq/export", dead.export, methods=["GET"]),
        Route("/go", overview.go, methods=["GET"]),
        Route("/events/queues", overview.queue_stream, methods=["GET"]),
        Route("/events/tasks/{task_id:path}", tasks.task_stream, methods=["GET"]),
        Route("/events/workflows/{run_id:path}", runs.run_stream, methods=["GET"]),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("taskq.dashboard", "static")]), name="static"),
        Mount(API, routes=twins),
        *twins,
    ]


def create_app(config: DashboardConfig, client: Client) -> Starlette:
    """The application for one dashboard process, reading through `client` (connected on
    the event loop that serves it)."""
    app = Starlette(
        routes=routes(),
        middleware=[Middleware(Gate, config=config)],
        exception_handlers={TaskqError: _taskq_error, HTTPException: _http_error},
    )
    app.state.config = config
    app.state.client = client
    app.state.templates = environment()
    app.state.stopping = asyncio.Event()  # set when the dashboard stops: live streams end
    return app


async def _taskq_error(request: Request, exc: Exception) -> Response:
    return refuse(request, as_page_error(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "no such page" if exc.status_code == 404 else str(exc.detail)
    return refuse(request, DashboardError(exc.status_code, message))


def as_page_error(exc: Exception) -> DashboardError:
    """The HTTP status and message a taskq error is shown with."""
    if isinstance(exc, DashboardError):
        return exc
    if isinstance(exc, PermissionDenied):
        return DashboardError(
            403, f"NATS refused it: {exc} (the dashboard's NATS user lacks the right)"
        )
    if isinstance(exc, NotFound):
        return DashboardError(404, str(exc))
    if isinstance(exc, ConfigError | ValidationError):
        return DashboardError(400, str(exc))
    if isinstance(exc, RunEnded):
        return DashboardError(409, str(exc))
    if isinstance(exc, ConnectError | TransientError):
        return DashboardError(503, f"NATS is unavailable: {exc}")
    return DashboardError(502, f"NATS said: {exc}")
