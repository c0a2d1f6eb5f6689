"""`/dlq`: dead letters filtered (queue, task, reason, time range, text in the error) and
paginated by sequence cursors; one record (`/dlq/<seq>`); requeue one or all matching,
purge one or all matching (confirmed first), export as JSON lines.

Bulk actions act on the records matching when the operator confirmed: the confirmation
carries the DLQ's last sequence then (`max_seq`), so records that arrive meanwhile are not
swept along with them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from taskq.dashboard.config import DashboardError
from taskq.dashboard.forms import cursor, dlq_filters, filter_fields, text
from taskq.dashboard.gate import checked_form
from taskq.dashboard.render import ask, done, respond
from taskq.dashboard.shared import client_of, link, url
from taskq.dlq.browse import get_dead, iter_dead
from taskq.dlq.pages import page as dead_page
from taskq.dlq.purge import purge
from taskq.dlq.record import REASONS, DeadLetter
from taskq.dlq.requeue import requeue
from taskq.dlq.transfer import export_lines
from taskq.errors import NotFound
from taskq.topology.partitions import queues_on_server

PAGE = 50


async def dlq_page(request: Request) -> Response:
    """A page of dead letters, newest first, with the filters and the cursors."""
    client, query = client_of(request), request.query_params
    before, after = cursor(query, "before"), cursor(query, "after")
    found = await dead_page(client, dlq_filters(query), limit=PAGE, before=before, after=after)
    fields = filter_fields(query)
    data = {
        "records": [r.to_dict() for r in found.records],
        "older": found.older,
        "newer": found.newer,
        "total": found.total,
        "scanned": found.scanned,
    }
    return respond(
        request,
        "dlq.html",
        data,
        title="Dead letters",
        found=found,
        fields=fields,
        queues=sorted(await queues_on_server(client.connection, client.names)),
        reasons=REASONS,
        older=_link(fields, before=found.older) if found.older else "",
        newer=_link(fields, after=found.newer) if found.newer else "",
        newest=_link(fields) if before or after else "",
        here=_link(fields, before=before, after=after),
    )


def _link(fields: dict[str, str], **cursors: int | None) -> str:
    return link("/dlq", fields, **cursors)


async def record_page(request: Request) -> Response:
    """One dead letter: the original message, the error and its traceback."""
    record = await _record(request)
    data = record.model_dump(mode="json")
    title = f"Dead letter {record.seq}"
    return respond(
        request, "dead_letter.html", data, title=title, r=record, message=data["message"]
    )


async def _record(request: Request) -> DeadLetter:
    seq = int(request.path_params["seq"])
    record = await get_dead(client_of(request), str(seq))
    if record is None:
        raise DashboardError(404, f"no dead letter {seq}")
    return record


async def requeue_one(request: Request) -> Response:
    """POST: send one dead letter back to its queue."""
    form = await checked_form(request)
    record = await _record(request)
    return await _requeued(request, [record], _back(form))


async def purge_one(request: Request) -> Response:
    """POST: delete one dead letter for good, once confirmed."""
    form = await checked_form(request)
    record = await _record(request)
    if text(form, "confirm") != "yes":
        question = f"Delete dead letter {record.seq} ({record.task}[{record.id}]) for good?"
        return ask(request, question, "", {"back": _back(form)}, 1, url("dlq", record.seq))
    deleted = await purge(client_of(request), [record])
    return done(request, "/dlq", "dlq-purged", {"purged": deleted}, n=deleted)


async def requeue_matching(request: Request) -> Response:
    """POST: requeue every dead letter matching the filters, once confirmed."""
    form = await checked_form(request)
    records, pending = await _matching(request, form)
    if pending is not None:
        return pending
    return await _requeued(request, records, _link(filter_fields(form)))


async def purge_matching(request: Request) -> Response:
    """POST: delete every dead letter matching the filters for good, once confirmed."""
    form = await checked_form(request)
    records, pending = await _matching(request, form, purging=True)
    if pending is not None:
        return pending
    deleted = await purge(client_of(request), records)
    where = _link(filter_fields(form))
    return done(request, where, "dlq-purged", {"purged": deleted}, n=deleted)


async def _matching(
    request: Request, form: dict[str, str], purging: bool = False
) -> tuple[list[DeadLetter], Response | None]:
    """The records a bulk action applies to; or, before it is confirmed, the page asking
    for confirmation (with their count and the sequence they stop at)."""
    client, filters = client_of(request), dlq_filters(form)
    limit = cursor(form, "max_seq")
    if limit is None:
        limit = await _last_seq(request)
    records = [r async for r in iter_dead(client, filters) if r.seq <= limit]
    if text(form, "confirm") == "yes":
        return records, None
    question = _question(purging, len(records), filter_fields(form))
    detail = "They cannot be brought back." if purging else "Each goes back to its own queue."
    fields = {**filter_fields(form), "max_seq": str(limit)}
    back = _link(filter_fields(form))
    return records, ask(request, question, detail, fields, len(records), back, danger=purging)


# How each filter reads in a bulk action's question.
_SAYS = {
    "queue": "queue {}",
    "task": "task {}",
    "reason": "reason {}",
    "since": "failed within {}",
    "until": "not within the last {}",
    "q": "error containing “{}”",
}


def _question(purging: bool, count: int, fields: dict[str, str]) -> str:
    """A bulk action's question, naming every filter it applies."""
    which = ", ".join(_SAYS[key].format(value) for key, value in fields.items())
    what = f"the {count} dead letter(s) with {which}" if which else f"ALL {count} dead letter(s)"
    return f"Delete {what} for good?" if purging else f"Requeue {what}?"


async def _last_seq(request: Request) -> int:
    client = client_of(request)
    try:
        return (await client.connection.streams.state(client.names.dlq_stream)).last_seq
    except NotFound:
        return 0


async def _requeued(request: Request, records: list[DeadLetter], where: str) -> Response:
    result = await requeue(client_of(request), records)
    body = {"requeued": result.requeued, "failed": result.failed}
    if result.failed and not result.requeued:
        raise DashboardError(502, f"not requeued: {result.failed[0][1]}")
    return done(request, where, "requeued", body, n=result.requeued)


def _back(form: dict[str, str]) -> str:
    back = text(form, "back") or "/dlq"
    return back if back.startswith("/dlq") else "/dlq"


async def export(request: Request) -> Response:
    """GET: the matching dead letters as JSON lines (`taskq dlq import` reads them)."""
    client, filters = client_of(request), dlq_filters(request.query_params)

    async def lines() -> AsyncIterator[str]:
        async for line in export_lines(client, filters):
            yield line + "\n"

    headers = {"content-disposition": 'attachment; filename="dead-letters.jsonl"'}
    return StreamingResponse(lines(), media_type="application/x-ndjson", headers=headers)
