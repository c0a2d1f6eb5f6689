"""`taskq dlq ...`: inspect, requeue, purge, export and import dead letters."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from taskq.cli.common import Context, confirm, parse_duration, pass_ctx
from taskq.cli.progressbar import progress
from taskq.client import Client
from taskq.dlq.browse import Filters, count_stored, get_dead, list_dead
from taskq.dlq.record import REASONS, DeadLetter
from taskq.operate.tracebacks import terminal_lines


def filter_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--queue/--task/--reason/--since, shared by every command that selects records."""
    fn = click.option(
        "--since",
        callback=parse_duration,
        metavar="DURATION",
        help="failed within this long ago: 30s, 15m, 2h, 7d",
    )(fn)
    fn = click.option("--reason", type=click.Choice(REASONS))(fn)
    fn = click.option("--task", help="task name")(fn)
    return click.option("--queue", help="queue name")(fn)


def make_filters(
    queue: str | None, task: str | None, reason: str | None, since: float | None
) -> Filters:
    return Filters(queue=queue, task=task, reason=reason, since=since)


@click.group()
def dlq() -> None:
    """Dead letters: every task that could not succeed, with its reason and traceback."""


@dlq.command("ls")
@filter_options
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="an array of objects, for scripts")
@pass_ctx
def ls(
    ctx: Context,
    queue: str | None,
    task: str | None,
    reason: str | None,
    since: float | None,
    limit: int,
    as_json: bool,
) -> None:
    """List dead letters, newest first."""
    filters = make_filters(queue, task, reason, since)
    records = ctx.run(lambda client: list_dead(client, filters, limit=limit, newest_first=True))
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in records], indent=2))
        return
    if not records:
        click.echo("no dead letters")
        return
    sites = any(r.site for r in records)  # letters of edge sites (docs/edge.md): their site
    click.echo(
        f"{'SEQ':>6}  {'FAILED AT':24}  "
        + (f"{'SITE':8}  " if sites else "")
        + f"{'QUEUE':10}  {'TASK':20}  {'REASON':12}  {'TRIES':>5}  ERROR"
    )
    for r in records:
        error = f"{r.error.type}: {r.error.message}" if r.error.type else r.error.message
        site = f"{(r.site or '-')[:8]:8}  " if sites else ""
        click.echo(
            f"{r.seq:>6}  {r.failed_at:24}  {site}{r.queue[:10]:10}  {r.task[:20]:20}  "
            f"{r.reason:12}  {r.attempts:>5}  {error[:60]}"
        )


@dlq.command()
@click.argument("ref", metavar="ID|SEQ")
@click.option("--json", "as_json", is_flag=True)
@click.option("-v", "--verbose", is_flag=True, help="the traceback as recorded, taskq's frames too")
@pass_ctx
def show(ctx: Context, ref: str, as_json: bool, verbose: bool) -> None:
    """Everything about one dead letter: arguments and the traceback (the user's frames;
    -v: taskq's too)."""
    record = ctx.run(lambda client: get_dead(client, ref))
    if record is None:
        raise click.BadParameter(f"no dead letter {ref!r}", param_hint="ID|SEQ")
    if as_json:
        click.echo(record.model_dump_json(indent=2))
        return
    for key, value in record.to_dict().items():
        if key != "error":
            click.echo(f"{key:13} {value}")
    message = record.model_dump(mode="json", include={"message"})["message"]  # typed or dict
    click.echo(f"{'message':13} {json.dumps(message)[:2000]}")
    click.echo(f"{'error':13} {record.error.type}: {record.error.message}")
    for line in terminal_lines(record.error.traceback, verbose):
        click.echo(line)


@dlq.command()
@click.argument("refs", nargs=-1, metavar="[ID|SEQ]...")
@click.option("--all", "everything", is_flag=True, help="every record matching the filters")
@filter_options
@click.option("--to-queue", help="send them to this queue instead of their own")
@click.option("--dry-run", is_flag=True, help="show what would be requeued")
@pass_ctx
def requeue(
    ctx: Context,
    refs: tuple[str, ...],
    everything: bool,
    queue: str | None,
    task: str | None,
    reason: str | None,
    since: float | None,
    to_queue: str | None,
    dry_run: bool,
) -> None:
    """Send dead letters back to their queue (a new message id), then delete them."""
    if bool(refs) == everything:
        raise click.UsageError("give ID|SEQ arguments or --all (with optional filters)")
    filters = make_filters(queue, task, reason, since)
    if refs and not filters.empty:
        raise click.UsageError("filters go with --all, not with ID|SEQ arguments")
    ctx.run(lambda client: _requeue(client, refs, filters, to_queue, dry_run))


async def _requeue(
    client: Client, refs: tuple[str, ...], filters: Filters, to_queue: str | None, dry_run: bool
) -> None:
    from taskq.dlq.requeue import requeue as do_requeue

    records = await _select(client, refs, filters)
    if dry_run:
        for r in records:
            click.echo(f"would requeue {r.seq} {r.task}[{r.id}] -> {to_queue or r.queue}")
        click.echo(f"{len(records)} dead letter(s) would be requeued")
        return
    with progress("requeue", len(records)) as advance:
        result = await do_requeue(client, records, to_queue, progress=advance)
    for seq, why in result.failed:
        click.echo(f"not requeued {seq}: {why}", err=True)
    click.echo(f"requeued {result.requeued} dead letter(s)")
    if result.failed:
        raise SystemExit(1)


async def _select(client: Client, refs: tuple[str, ...], filters: Filters) -> list[DeadLetter]:
    if not refs:
        matching: list[DeadLetter] = await list_dead(client, filters)
        return matching
    found = []
    for ref in refs:
        record = await get_dead(client, ref)
        if record is None:
            raise click.BadParameter(f"no dead letter {ref!r}", param_hint="ID|SEQ")
        found.append(record)
    return found


@dlq.command()
@filter_options
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@pass_ctx
def purge(
    ctx: Context,
    queue: str | None,
    task: str | None,
    reason: str | None,
    since: float | None,
    yes: bool,
) -> None:
    """Delete dead letters for good."""
    filters = make_filters(queue, task, reason, since)
    what = "ALL dead letters" if filters.empty else "the matching dead letters"
    confirm(yes, f"delete {what}?", "purge")
    count = ctx.run(lambda client: _purge(client, filters))
    click.echo(f"purged {count} dead letter(s)")


async def _purge(client: Client, filters: Filters) -> int:
    from taskq.dlq.purge import purge as purge_records
    from taskq.dlq.purge import purge_all

    count: int
    if filters.empty:  # one request for the whole stream: the bar jumps once, at its end
        with progress("purge", await count_stored(client)) as advance:
            count = await purge_all(client)
            advance(count)
    else:
        records = await list_dead(client, filters)
        with progress("purge", len(records)) as advance:
            count = await purge_records(client, records, advance)
    return count


@dlq.command("export")
@filter_options
@click.option("-o", "--output", type=click.File("w"), default="-", show_default=True)
@pass_ctx
def export(
    ctx: Context,
    queue: str | None,
    task: str | None,
    reason: str | None,
    since: float | None,
    output: Any,
) -> None:
    """Write dead letters as JSON lines (byte-exact), e.g. `> dead.jsonl`."""
    from taskq.dlq.transfer import export_lines

    filters = make_filters(queue, task, reason, since)

    async def go(client: Client) -> int:
        count = 0
        with progress("export", await count_stored(client, filters)) as advance:
            async for line in export_lines(client, filters, advance):
                output.write(line + "\n")
                count += 1
        return count

    count = ctx.run(go)
    click.echo(f"exported {count} dead letter(s)", err=True)


@dlq.command("import")
@click.argument("source", type=click.File("r"), metavar="FILE")
@pass_ctx
def import_(ctx: Context, source: Any) -> None:
    """Load dead letters exported with `taskq dlq export` into this DLQ."""
    from taskq.dlq.transfer import ImportFormatError, import_parsed, parse_lines

    try:  # checked before connecting: a bad file is a usage error, server or not
        parsed = parse_lines(source.read().splitlines())
    except ImportFormatError as exc:
        raise click.BadParameter(str(exc), param_hint="FILE") from None

    async def go(client: Client) -> int:
        with progress("import", len(parsed)) as advance:
            return await import_parsed(client, parsed, advance)

    count = ctx.run(go)
    click.echo(f"imported {count} dead letter(s)")
