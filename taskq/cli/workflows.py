"""`taskq workflows ls|show|start|signal|cancel|retry`: durable workflow runs
(taskq.workflows.views; docs/cli.md)."""

from __future__ import annotations

import json
import shlex
from typing import Any

import click

from taskq.cli.common import Context, parse_json_args, pass_ctx
from taskq.errors import ArgumentsError
from taskq.states import LEGACY_RUN
from taskq.workflows.run_lists import LISTED, PAGE, check_filters, collect_runs
from taskq.workflows.sends import cancel_run, retry_run, send_signal
from taskq.workflows.store import STATES
from taskq.workflows.story import show as show_workflow
from taskq.workflows.views import RunView


@click.group()
def workflows() -> None:
    """Durable workflow runs: list them, look into one, start, signal or cancel one."""


@workflows.command("ls")
@click.option(
    "--state",
    type=click.Choice([*STATES, *LEGACY_RUN]),
    help="runs in this state (`failed`: an earlier name of `dead`)",
)
@click.option("--name", metavar="WORKFLOW", help="runs of this workflow")
@click.option("--limit", type=click.IntRange(1, LISTED), default=PAGE, show_default=True)
@click.option(
    "--before", type=click.IntRange(1), metavar="SEQ", help="older than SEQ (a `more:` line's)"
)
@click.option("--json", "as_json", is_flag=True, help="an array of objects, for scripts")
@pass_ctx
def ls(
    ctx: Context,
    state: str | None,
    name: str | None,
    limit: int,
    before: int | None,
    as_json: bool,
) -> None:
    """List runs, most recently changed first."""
    check_filters(state, name)  # ConfigError: exit 2
    found, older = ctx.run(lambda client: collect_runs(client, state, name, limit, before))
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in found], indent=2))
        return
    if not found:
        click.echo("no workflow runs")
        return
    click.echo(f"{'UPDATED':20}  {'STATE':9}  {'WORKFLOW':20}  {'ID':30}  ERROR")
    for run in found:
        s = run.summary
        updated = s.updated_at[:19] + "Z" if s.updated_at else "-"
        error = (s.error or "")[:60]
        click.echo(f"{updated:20}  {s.state:9}  {s.name[:20]:20}  {s.id[:30]:30}  {error}")
    if older is not None:
        click.echo(f"more: {_again(state, name, limit, older)}")


def _again(state: str | None, name: str | None, limit: int, before: int) -> str:
    """The command that lists the next older runs."""
    words = ["taskq", "workflows", "ls"]
    for flag, value in (("--state", state), ("--name", name)):
        if value:
            words += [flag, value]
    return shlex.join([*words, "--limit", str(limit), "--before", str(before)])


@workflows.command("show")
@click.argument("run_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="one object, for scripts")
@pass_ctx
def show(ctx: Context, run_id: str, as_json: bool) -> None:
    """A run: its state, every step with its task id, state, attempts and result or error,
    its timers and the signals it was sent; a chain, group or chord: its tasks."""
    view = ctx.run(lambda client: show_workflow(client, run_id))
    if as_json:
        click.echo(json.dumps(view.to_dict(), indent=2, default=repr))
        return
    for line in _told(view) if view.summary.kind == "workflow" else _canvas(view):
        click.echo(line)


def _canvas(view: RunView) -> list[str]:
    s = view.summary
    lines = [f"{s.kind} {s.id}  {s.state}  final task {view.final or '-'}"]
    for step in view.steps:
        lines.append(f"  {step.role:8}  {step.target[:24]:24}  {step.state:9}  {step.id}".rstrip())
    return lines


def _progress(report: dict[str, Any] | None) -> str:
    """A running step's latest progress, as `taskq result --follow` prints it."""
    if report is None:
        return ""
    value = report.get("value")
    shown = f"{value * 100:.0f}%" if isinstance(value, float) else json.dumps(value)[:40]
    return f"  progress {shown}" + (f" {report['message'][:60]}" if report.get("message") else "")


def _told(view: RunView) -> list[str]:
    s = view.summary
    lines = [f"run {s.id}  {s.name}  {s.state}", f"queue {s.queue}  started {s.started_at}"]
    if view.ended_at:
        lines[-1] += f"  ended {view.ended_at}"
    lines.append(f"input args={json.dumps(view.args)} kwargs={json.dumps(view.kwargs)}"[:300])
    if s.error:
        lines.append(f"error {s.error}")
    elif s.state == "succeeded":
        lines.append(f"result {json.dumps(view.result, default=repr)}"[:300])
    for step in view.steps:
        outcome = json.dumps(step.result, default=repr)[:80] if step.result is not None else ""
        if step.error:
            outcome = f"{step.error['type']}: {step.error['message']}"[:80]
        if step.running_on:
            outcome = f"on {step.running_on}" + _progress(step.progress)
        tries = f" x{step.attempts}" if step.attempts > 1 else ""
        lines.append(
            f"  {step.n:>4}  {step.kind:6}  {step.target[:24]:24}  {step.state:9}{tries}  "
            f"{step.id}  {outcome}".rstrip()
        )
    for signal in view.signals:
        lines.append(f"  signal {signal['name']}  {json.dumps(signal['payload'])[:80]}")
    return lines


@workflows.command("start")
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("name", metavar="NAME")
@click.argument("json_args", metavar="[JSON_ARGS]", required=False)
@click.option("--key", help="the run's id: starting it again is the same run")
@click.option("--json", "as_json", is_flag=True, help="print the run as JSON")
@pass_ctx
def start(
    ctx: Context, app_spec: str, name: str, json_args: str | None, key: str | None, as_json: bool
) -> None:
    """Start a run of workflow NAME with JSON_ARGS (an array or an object)."""
    app = ctx.app(app_spec)
    definition = app.workflows.get(name)
    if definition is None:
        known = ", ".join(sorted(app.workflows)) or "none"
        raise click.BadParameter(f"no workflow {name!r} in {app_spec} (it has: {known})")
    args, kwargs = parse_json_args(json_args)
    try:
        definition.validator.for_wire(args, kwargs)
    except ArgumentsError as exc:
        raise click.BadParameter(str(exc), param_hint="JSON_ARGS") from None

    async def go(_client: Any) -> Any:
        return await definition.options(key=key).start(*args, **kwargs)

    run = ctx.run(go, app=app)
    if as_json:
        told = {"id": run.id, "workflow": run.workflow, "queue": run.queue}
        click.echo(json.dumps({**told, "created": run.created}))
    elif run.created:
        click.echo(f"started {run.workflow} run {run.id}")
    else:
        click.echo(
            f"run {run.id} of {run.workflow} exists already (--key {key}): not started again"
        )


@workflows.command("signal")
@click.argument("run_id", metavar="ID")
@click.argument("name", metavar="NAME")
@click.argument("payload", metavar="[JSON]", required=False)
@pass_ctx
def signal(ctx: Context, run_id: str, name: str, payload: str | None) -> None:
    """Send run ID the signal NAME with a JSON payload (kept until the run waits for it)."""
    try:
        value = json.loads(payload) if payload is not None else None
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="JSON") from None
    ctx.run(lambda client: send_signal(client, run_id, name, value))
    click.echo(f"signal {name} sent to {run_id}")


@workflows.command("cancel")
@click.argument("run_id", metavar="ID")
@pass_ctx
def cancel(ctx: Context, run_id: str) -> None:
    """Cancel run ID: its running steps and children are cancelled."""
    ctx.run(lambda client: cancel_run(client, run_id))
    click.echo(f"cancel requested for {run_id}")


@workflows.command("retry")
@click.argument("run_id", metavar="ID")
@pass_ctx
def retry(ctx: Context, run_id: str) -> None:
    """Resume failed run ID from its failed step, keeping every completed step (after a
    code fix: deploy it, then retry)."""
    ctx.run(lambda client: retry_run(client, run_id))
    click.echo(f"run {run_id} resumes from its failed step")
