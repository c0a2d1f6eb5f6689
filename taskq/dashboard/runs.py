"""`/workflows`: durable workflow runs by state and name, most recently changed first,
paged; `/workflows/<id>`: one run's steps as a timeline, its timers and signals, live, with
signal, cancel and retry (confirmed first); the same URL, model and template show a chain,
group or chord by its id or a task's, its tasks as steps: one view for every kind.

Chains, groups and chords are in the same list (named `chain`, `group`, `chord`): their
workers keep a summary of each there (`taskq.workflows.canvas_runs`). See
docs/dashboard.md.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from taskq.client import Client
from taskq.dashboard import tasks
from taskq.dashboard.config import DashboardError
from taskq.dashboard.forms import cursor, text
from taskq.dashboard.gate import checked_form
from taskq.dashboard.live import event_stream, run_events
from taskq.dashboard.render import API, ask, done, respond, wants_json
from taskq.dashboard.shared import client_of, link, param, url
from taskq.errors import NotFound, PermissionDenied
from taskq.ids import safe_id
from taskq.workflows.run_lists import runs_page
from taskq.workflows.sends import cancel_run, retry_run, send_signal
from taskq.workflows.store import FINAL, STATES, RunSummary, load_summary
from taskq.workflows.story import canvas_view, workflow_id_of
from taskq.workflows.views import RunView, find_summary, show_run

RUN_KEYS = ("state", "name")  # the runs list's filters


async def runs_list(request: Request) -> Response:
    """Runs, most recently changed first, with the filters and the cursors."""
    client, query = client_of(request), request.query_params
    fields = {key: value for key in RUN_KEYS if (value := text(query, key)) is not None}
    before = cursor(query, "before")
    found = await runs_page(client, fields.get("state"), fields.get("name"), before=before)
    return respond(
        request,
        "runs.html",
        found.to_dict(),
        title="Workflow runs",
        found=found,
        nested=_nested(found.runs),
        final=FINAL,
        fields=fields,
        states=STATES,
        older=link("/workflows", fields, before=found.older) if found.older else "",
        newest=link("/workflows", fields) if before else "",
    )


def _nested(runs: list[Any], deepest: int = 8) -> list[tuple[int, Any]]:
    """The page's runs with each child run right under its parent when both are on the
    page (depth: how far in), in the page's order otherwise."""
    ids = {listed.summary.id for listed in runs}

    def parent_here(listed: Any) -> str | None:
        parent = listed.summary.parent
        return parent if parent in ids and parent != listed.summary.id else None

    children: dict[str, list[Any]] = {}
    for listed in runs:
        if (parent := parent_here(listed)) is not None:
            children.setdefault(parent, []).append(listed)
    out: list[tuple[int, Any]] = []
    placed: set[int] = set()

    def place(listed: Any, depth: int) -> None:
        if id(listed) in placed:  # met again through a cycle of parents
            return
        out.append((depth, listed))
        placed.add(id(listed))
        if depth < deepest:  # deeper ones are listed as roots below
            for child in children.pop(listed.summary.id, []):
                place(child, depth + 1)

    # the roots first, then any run no root led to (a cycle of parents in hostile summaries,
    # or past `deepest`): every run is listed once
    roots = [listed for listed in runs if parent_here(listed) is None]
    for listed in roots + runs:
        place(listed, 0)
    return out


async def workflow_page(request: Request) -> Response:
    """Every workflow's page: a durable run's; else a chain's, group's or chord's (one
    view, `taskq.workflows.story.show`: the same model and template)."""
    client, ref = client_of(request), param(request, "flow_id")
    if not ref:
        return RedirectResponse("/workflows", 303)
    view = await _run(client, ref)
    if view is None:
        owner = workflow_id_of(ref)  # a durable run's step id (`<run>.<n>`) leads to its run
        if owner != ref and await tasks.is_run(client, owner):
            where = url("workflows", owner)
            return RedirectResponse(API + where if wants_json(request) else where, 303)
        view = await _canvas(client, ref)
    summary = view.summary
    live = summary.state not in FINAL and summary.kind == "workflow"
    events = link(url("events", "workflows", ref), {"state": summary.state}, last=view.last_seq)
    return respond(
        request,
        "run.html",
        view.to_dict(),
        title=f"Run {summary.name} {ref}" if summary.kind == "workflow" else f"Workflow {ref}",
        run=view,
        summary=summary,
        timers=[s for s in view.steps if s.until],
        finished=summary.state in FINAL,
        events=events if live else "",
    )


async def _canvas(client: Client, ref: str) -> RunView:
    """The chain, group or chord `ref` names; a 404 when none (nor a run) has it."""
    # a chain, group or chord's id is a ULID, plain: any other is none of theirs
    view = await canvas_view(client, ref) if safe_id(ref) == ref else None
    if view is None:
        raise DashboardError(
            404,
            f"no workflow {ref!r}: no durable run has this id, and no step of a chain, "
            "group or chord is known by it",
            see=("/workflows", "List the workflow runs"),
        )
    return view


async def _run(client: Client, ref: str) -> RunView | None:
    """The durable run `ref`; None when there is none (it may be a chain, group or chord's
    id). A NATS user that may not read journals is refused a run's (it exists), and gets
    None for any other id."""
    try:
        return await show_run(client, ref)
    except NotFound:
        return None
    except PermissionDenied:
        if await tasks.is_run(client, ref):
            raise  # it is a run, whose journal this NATS user may not read: say so
        return None


async def run_stream(request: Request) -> Response:
    """GET /events/workflows/<id>?state=S&last=SEQ: a `run` event whenever the run's state
    or journal differs from what the page showed (S, SEQ), the last one `final`."""
    client, run_id = client_of(request), param(request, "run_id")
    shown = (request.query_params.get("state", ""), cursor(request.query_params, "last") or 0)
    return event_stream(request, run_events(client, run_id, shown))


async def signal(request: Request) -> Response:
    """POST (name, payload: JSON or blank for null): send the run a signal."""
    form = await checked_form(request)
    client, run_id = client_of(request), param(request, "run_id")
    name = text(form, "name")
    if not name:
        raise DashboardError(400, "give the signal's name (what the run's wait_for waits for)")
    payload = _payload(form.get("payload", ""))
    summary = await _unfinished(client, run_id, "a signal would never be read")
    await send_signal(client, run_id, name, payload, (summary.name, summary.queue))
    return done(request, url("workflows", run_id), "signalled", {"id": run_id, "signal": name})


def _payload(given: str) -> Any:
    """A signal's payload: JSON (blank: null); a 400 saying where it is not JSON."""
    if not given.strip():
        return None
    try:
        return json.loads(given)
    except ValueError as exc:
        raise DashboardError(400, f"the payload is not JSON: {exc}") from None


async def cancel(request: Request) -> Response:
    """POST: cancel the run (its running steps and children too), once confirmed."""
    form = await checked_form(request)
    client, run_id = client_of(request), param(request, "run_id")
    summary = await _unfinished(client, run_id, "nothing to cancel")
    if text(form, "confirm") != "yes":
        return ask(
            request,
            f"Cancel run {run_id} of {summary.name}?",
            "Its running steps and child runs are cancelled, and it ends cancelled.",
            {},
            1,
            url("workflows", run_id),
        )
    await cancel_run(client, run_id, (summary.name, summary.queue))
    return done(request, url("workflows", run_id), "run-cancel", {"id": run_id, "cancel": True})


async def retry(request: Request) -> Response:
    """POST: resume a failed run from its failed step, once confirmed."""
    form = await checked_form(request)
    client, run_id = client_of(request), param(request, "run_id")
    summary = await _summary(client, run_id)
    if summary.state != "dead":
        raise DashboardError(
            409, f"only a dead run can be retried; run {run_id} is {summary.state}"
        )
    if text(form, "confirm") != "yes":
        return ask(
            request,
            f"Retry run {run_id} of {summary.name} from its failed step?",
            "Every completed step is kept; the failed steps run again under new ids "
            "(deploy the fix first).",
            {},
            1,
            url("workflows", run_id),
            danger=False,
        )
    await retry_run(client, run_id)
    return done(request, url("workflows", run_id), "run-retry", {"id": run_id, "retry": True})


async def _summary(client: Client, run_id: str) -> RunSummary:
    summary = await load_summary(client, run_id)
    if summary is None:
        raise DashboardError(404, f"no workflow run {run_id!r}")
    return summary


async def _unfinished(client: Client, run_id: str, why: str) -> RunSummary:
    """The run's summary (a run no decision took yet: from its start); 404 when there is
    no run, 409 when it already ended (`why`)."""
    summary = await find_summary(client, run_id)
    if summary is None:
        raise DashboardError(404, f"no workflow run {run_id!r}")
    if summary.state in FINAL:
        raise DashboardError(409, f"run {run_id} already ended {summary.state}: {why}")
    return summary
