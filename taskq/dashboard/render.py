"""Answering a request: a page rendered from its template, or the same data as JSON (the
page's twin for scripts), and redirects that carry a notice after an action.

Every template is autoescaped: a task's arguments, errors and tracebacks are text, never
markup, whatever they hold.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from taskq.dashboard.config import DashboardConfig, DashboardError
from taskq.operate.tracebacks import LINK_TEXT, fold, plural
from taskq.records.clock import format_epoch, parse_time

API = "/api"
# What an action did, shown on the page it redirects to (a code, never text from the URL).
NOTICES = {
    "paused": "Queue paused: workers receive none of its tasks until it is resumed.",
    "resumed": "Queue resumed.",
    "purged": "Removed {n} stored task(s) from the queue.",
    "requeued": "Requeued {n} dead letter(s).",
    "dlq-purged": "Deleted {n} dead letter(s).",
    "cancelled": "Cancelled: the task will not run.",
    "cancelling": "Cancelling: its worker is stopping it.",
    "finished": "Nothing to cancel: the task already finished.",
    "removed": "Schedule removed.",
    "signalled": "Signal sent: the run reads it when it waits for it (kept until then).",
    "run-cancel": "Cancel requested: the run ends cancelled, with its running steps.",
    "run-retry": "Retrying: the run resumes from its failed step.",
}


def environment() -> Environment:
    """The templates shipped in the package, autoescaped, failing on undefined names."""
    env = Environment(
        loader=PackageLoader("taskq.dashboard", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        pretty=pretty,
        num=number,
        ago=ago,
        clock=clock,
        took=took,
        bar=bar,
        runtime=runtime,
        epoch=epoch,
        quote=quote_part,
        short=short,
        folded=folded_trace,
    )
    return env


def wants_json(request: Request) -> bool:
    """The JSON twin: under `/api/`, or asked for with `Accept: application/json`."""
    if request.url.path.startswith(API + "/"):
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def json_response(data: Any, status: int = 200) -> Response:
    body = json.dumps(data, default=repr, ensure_ascii=False)
    return Response(body, status_code=status, media_type="application/json")


def respond(request: Request, template: str, data: Any, **context: Any) -> Response:
    """The page from `template` (with `context`), or `data` as JSON for scripts."""
    if wants_json(request):
        return json_response(data)
    return page(request, template, **context)


def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
    """Render `template` with what every page shows (navigation, CSRF token, notices)."""
    config: DashboardConfig = request.app.state.config
    env: Environment = request.app.state.templates
    notice = NOTICES.get(request.query_params.get("notice", ""), "")
    count = request.query_params.get("n", "")
    values: dict[str, Any] = {
        "request": request,
        "path": request.url.path,
        "status": status,
        "title": "taskq",
        "events": "",
        "csrf": request.scope.get("state", {}).get("csrf", ""),
        "read_only": config.read_only,
        "server": config.server_label(),
        "notice": notice.format(n=count if count.isdigit() else "?"),
    }
    values.update(context)
    return HTMLResponse(env.get_template(template).render(values), status_code=status)


def done(request: Request, where: str, notice: str, result: Any, n: int | None = None) -> Response:
    """After an action: JSON `result` for scripts, or a redirect (303) to `where` with a
    notice for people (reloading that page does not repeat the action)."""
    if wants_json(request):
        return json_response(result)
    query = {"notice": notice, **({"n": str(n)} if n is not None else {})}
    sep = "&" if "?" in where else "?"
    return RedirectResponse(f"{where}{sep}{urlencode(query)}", status_code=303)


def pretty(value: Any) -> str:
    """A value as JSON text, indented when long (escaped by the template like any text)."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return (
        text if len(text) <= 80 else json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    )


def folded_trace(text: str) -> list[dict[str, str]] | None:
    """A traceback as the pages show it (taskq.operate.tracebacks), one part per exception, the
    raised one first: `head` (what it is to the one before: "" for the first), `shown`
    (the user's frames, then the exception), `hidden` (taskq's frames, folded) and the
    `summary` that folds them. None when it is not a traceback: shown as it is."""
    parsed = fold(text)
    if parsed is None:
        return None
    return [
        {
            "head": f"{LINK_TEXT[s.link]}: {s.exception}" if s.link else "",
            "shown": "\n".join([*s.shown(), s.exception]),
            "hidden": "\n".join(s.hidden_lines()),
            "summary": f"{plural(len(s.hidden()))} ({', '.join(s.modules())})",
        }
        for s in parsed.sections
    ]


def short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def number(value: float | int) -> str:
    return f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"


def ago(value: float | str | None) -> str:
    """Seconds (or an RFC 3339 time) as a short age: `4s`, `3m12s`, `2h05m`, `3d4h`."""
    if value is None or value == "":
        return "-"
    seconds = (
        (datetime.now(UTC) - parse_time(value)).total_seconds() if isinstance(value, str) else value
    )
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def clock(value: str | None) -> str:
    """An RFC 3339 time as `2026-11-23 21:05:09.042Z` (milliseconds, UTC: attempts a
    fraction of a second apart read apart)."""
    if not value:
        return "-"
    moment = parse_time(value).astimezone(UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d}Z"


def took(start: str | None, end: str | None) -> str:
    """The time from `start` to `end` (RFC 3339): `0.042 s`, `12.500 s`, `3m12s`; `-` when
    either is missing."""
    if not start or not end:
        return "-"
    seconds = max(0.0, (parse_time(end) - parse_time(start)).total_seconds())
    return f"{seconds:.3f} s" if seconds < 60 else ago(seconds)


def bar(
    start: str | None, end: str | None, first: str | None, last: str | None
) -> tuple[int, int] | None:
    """Where a step's `start`..`end` sits on its run's time axis `first`..`last` (None: now),
    as (x, width) out of 1000: a bar drawn as an SVG rect (no inline style: the CSP allows
    none). A step not started, or an axis of no length, has none."""
    if not start or not first:
        return None
    origin = parse_time(first)
    axis = ((parse_time(last) if last else datetime.now(UTC)) - origin).total_seconds()
    if axis <= 0:
        return None
    begin = (parse_time(start) - origin).total_seconds()
    finish = (parse_time(end) if end else datetime.now(UTC)) - origin
    x = min(1000, max(0, round(1000 * begin / axis)))
    width = min(1000 - x, max(2, round(1000 * (finish.total_seconds() - begin) / axis)))
    return x, width


def runtime(seconds: float | None) -> str:
    """A run time as the history shows it: `0.8 ms`, `12.3 ms`, `1.25 s`; `-` for none."""
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def epoch(value: float | None) -> str:
    """Epoch seconds (`time.time()`) as `clock` shows a time; `-` for none."""
    return clock(format_epoch(value)) if value else "-"


def quote_part(value: str) -> str:
    """A value for one URL path segment (slashes too are escaped)."""
    return quote(str(value), safe="")


def ask(
    request: Request,
    question: str,
    detail: str,
    fields: dict[str, Any],
    count: int,
    back: str,
    danger: bool = True,
) -> Response:
    """The confirmation step of an action on many things or one that cannot be undone: a
    page whose form repeats the action with `confirm=yes` (its button styled as
    destructive when `danger`); for scripts, 409 with the count and the fields to send back
    with `confirm=yes` (a bulk action's `max_seq`: it then touches only what it counted)."""
    if wants_json(request):
        asked = {"error": "send confirm=yes to do it", "count": count, "fields": fields}
        return json_response(asked, 409)
    if count == 0:
        raise DashboardError(409, f"{question.rstrip('?')}: there is nothing to do.")
    return page(
        request,
        "confirm.html",
        title="Confirm",
        question=question,
        detail=detail,
        action=request.url.path,
        fields=fields,
        back=back,
        danger=danger,
    )
