"""What every handler reaches through the application: the one NATS client of this
dashboard process (on the server's event loop) and the options it was started with."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from starlette.requests import Request

from taskq.client import Client
from taskq.dashboard.config import DashboardConfig


def client_of(request: Request) -> Client:
    """The dashboard's connection (every request shares it: one per process)."""
    client: Client = request.app.state.client
    return client


def config_of(request: Request) -> DashboardConfig:
    config: DashboardConfig = request.app.state.config
    return config


def param(request: Request, name: str) -> str:
    """A path parameter as text."""
    return str(request.path_params[name])


def url(*parts: object) -> str:
    """A local URL from path segments, each escaped (`url("tasks", id)`)."""
    return "/" + "/".join(quote(str(p), safe="") for p in parts)


def link(path: str, fields: dict[str, str], **cursors: int | None) -> str:
    """`path` with a page's filters and cursors as its query (None cursors left out)."""
    query = {**fields, **{k: str(v) for k, v in cursors.items() if v is not None}}
    return path + (f"?{urlencode(query)}" if query else "")
