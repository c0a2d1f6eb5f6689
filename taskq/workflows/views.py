"""One durable workflow run as operators see it, from the server alone (no App needed):
its steps, timers and signals with their states and times, its inputs and result
(`taskq workflows show`, the dashboard's run page); the listing is taskq.workflows.run_lists."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from taskq.client import Client
from taskq.errors import NotFound
from taskq.ids import safe_id
from taskq.records.clock import format_epoch, parse_time
from taskq.records.heartbeats import list_workers
from taskq.records.progress import latest
from taskq.records.results import fetch, fetch_run
from taskq.workflows import store
from taskq.workflows.journal import (
    Event,
    child_of,
    outcome_of,
    retried,
    step_id,
)

RECORDS_AT_ONCE = 64  # steps' result records read concurrently by `show_run`


@dataclass
class StepView:
    """One command of a run, as `taskq workflows show` tells it: `made_at` when its round
    was decided (epoch seconds); `until` a timer's due time (a sleep's, a wait's timeout);
    `started_at`/`ended_at` a step's latest attempt or a child run's (RFC 3339, None when
    not known)."""

    n: int
    kind: str  # run, child, sleep, wait, now, uuid, random, patch
    target: str  # the task, child workflow or signal name
    id: str  # a step's task id, a child's run id
    state: str  # pending, running, succeeded, dead, cancelled, fired, received, timed out
    made_at: float = 0.0
    result: Any = None
    error: dict[str, Any] | None = None
    attempts: int = 0
    until: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    running_on: str | None = None  # a step running now: the worker (its last heartbeat)
    progress: dict[str, Any] | None = None  # ...and its latest progress report
    queue: str | None = None  # a chain's, group's or chord's task: its queue...
    role: str | None = None  # ...and its role: step (chain), member or callback (chord)

    def to_dict(self) -> dict[str, Any]:
        """As JSON shows it: every time RFC 3339 (`made_at` too), and `duration`, the
        seconds from its start to its end when both are known; a canvas's task also as
        `task` (its name)."""
        made = format_epoch(self.made_at) if self.made_at else None
        shown = {
            **self.__dict__,
            "made_at": made,
            "duration": seconds(self.started_at, self.ended_at),
        }
        return shown if self.role is None else {**shown, "task": self.target}


@dataclass
class RunView:
    """One run: its summary, its steps in order, and the signals it was sent (`last_seq`:
    the journal's last event read, which a live page compares with `journal_last`)."""

    summary: store.RunSummary
    steps: list[StepView] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)
    last_seq: int = 0
    args: list[Any] | None = None  # its inputs, as its start holds them
    kwargs: dict[str, Any] | None = None
    result: Any = None  # its return value, once it succeeded (its record's)
    ended_at: str | None = None  # when it ended (None: it has not)
    final: str | None = None  # a chain's or chord's final task (its result is the canvas's)

    def to_dict(self) -> dict[str, Any]:
        s = self.summary
        return {
            **s.to_dict(),
            "final": self.final,
            "args": self.args,
            "kwargs": self.kwargs,
            "result": self.result,
            "ended_at": self.ended_at,
            "duration": seconds(s.started_at, self.ended_at),
            "steps": [step.to_dict() for step in self.steps],
            "signals": self.signals,
        }


def seconds(start: str | None, end: str | None) -> float | None:
    """The seconds between two RFC 3339 times (None when either is not known)."""
    if not start or not end:
        return None
    try:
        return round((parse_time(end) - parse_time(start)).total_seconds(), 3)
    except ValueError:
        return None


async def show_run(client: Client, run_id: str) -> RunView:
    """A run with every step (task id, state, attempts, result or error, times), timer and
    signal. A run no decision took yet (no summary: no worker ran it so far) is shown from
    its start event, `running` with no steps; NotFound when neither exists."""
    summary = await store.load_summary(client, run_id)
    journal = await store.read(client, run_id)
    summary = summary or _from_start(run_id, journal)
    if summary is None:
        raise NotFound(f"no workflow run {run_id}")
    events, retries = retried(run_id, journal)
    visible = [e for e in events if e.kind in ("done", "fired", "signal", "cancel")]
    made: list[tuple[Event, float]] = [
        (command, float(e.details.get("at", 0.0)))
        for e in events
        if e.kind == "decided"
        for command in e.details.get("commands", [])
    ]
    commands = [c for c, _ in made]
    ended = {e.n: e for e in visible if e.kind == "done"}
    view = RunView(summary, last_seq=max((e.seq for e in journal), default=0))
    view.steps = [_step(run_id, c, at, visible, commands, ended, retries) for c, at in made]
    _cancelled_waits(view.steps, events, visible)
    for start in range(0, len(view.steps), RECORDS_AT_ONCE):
        await asyncio.gather(
            *(_timed(client, s) for s in view.steps[start : start + RECORDS_AT_ONCE])
        )
    await _running(client, view.steps)
    await _outcome(client, view, journal)
    view.signals = [
        {"name": e.details.get("name"), "payload": e.details.get("payload"), "at": _when(e)}
        for e in events
        if e.kind == "signal"
    ]
    return view


async def find_summary(client: Client, run_id: str) -> store.RunSummary | None:
    """The run's summary; for a run no decision took yet, one made from its start event
    (which needs the right to read journals); None when there is no such run."""
    summary = await store.load_summary(client, run_id)
    return summary or _from_start(run_id, await store.read(client, run_id))


def _from_start(run_id: str, journal: list[Event]) -> store.RunSummary | None:
    """A summary of a run no decision took yet, from its start event (None: no run); its
    time is the server's (the start's own `at` is a producer's word)."""
    start = journal[0] if journal and journal[0].kind == "start" else None
    if start is None:
        return None
    details, at = start.details, _when(start)
    parent = details["parent"].get("id") if isinstance(details.get("parent"), dict) else None
    return store.RunSummary(
        id=run_id,
        name=str(details.get("workflow", ""))[:200],
        queue=str(details.get("queue", ""))[:200],
        started_at=at,
        updated_at=at,
        parent=str(parent)[:200] if parent else None,
    )


def _when(event: Event) -> str:
    """When the server stored `event` (RFC 3339; empty when not known)."""
    return format_epoch(event.stored_at) if event.stored_at else ""


def _step(
    run_id: str,
    command: Event,
    at: float,
    visible: list[Event],
    made: list[Event],
    ended: dict[int, Event],
    retries: int,
) -> StepView:
    details = command.details
    target = str(details.get("task") or details.get("workflow") or details.get("name") or "")
    done = ended.get(command.n)
    ids = {
        "run": step_id(run_id, command.n, retries),
        "child": child_of(run_id, command, retries),
    }
    shown = str(done.details.get("id")) if done is not None else ids.get(command.kind, "")
    view = StepView(command.n, command.kind, target, shown, "pending", at)
    until = details.get("until")
    view.until = str(until) if until and command.kind in ("sleep", "wait") else None
    outcome = outcome_of(run_id, command, visible, made)
    if outcome is not None:
        view.state, view.result = _state(command, outcome.value, outcome.error)
        if outcome.error is not None:
            view.error = {"type": type(outcome.error).__name__, "message": str(outcome.error)}
    return view


def _cancelled_waits(steps: list[StepView], events: list[Event], visible: list[Event]) -> None:
    """Timers and waits the run's cancel ended (made before the code saw it, unanswered by
    then) show `cancelled`, not `timed out` or `fired`; so do commands made in the round
    the cancel came, which were never carried out (`abandoned`)."""
    cancels = [e.seq for e in visible if e.kind == "cancel"]
    if not cancels:
        return
    before = {e.n for e in visible if e.kind in ("fired", "done") and e.seq < cancels[0]}
    rounds = [e for e in events if e.kind == "decided"]
    by_n = {
        c.n: (c, int(r.details.get("upto", 0)))
        for r in rounds
        for c in r.details.get("commands", [])
    }
    for step in steps:
        command, upto = by_n.get(step.n, (None, 0))
        if command is None:
            continue
        waited = command.kind in ("sleep", "wait") and upto < cancels[0] and step.n not in before
        if command.details.get("abandoned") or (waited and step.state != "received"):
            step.state = "cancelled"


async def _outcome(client: Client, view: RunView, journal: list[Event]) -> None:
    """The run's inputs (its start's), and once it ended its end time and result."""
    start = journal[0].details if journal and journal[0].kind == "start" else {}
    args, kwargs = start.get("args"), start.get("kwargs")
    view.args = args if isinstance(args, list) else None
    view.kwargs = kwargs if isinstance(kwargs, dict) else None
    if view.summary.state in store.FINAL:
        view.ended_at = view.summary.updated_at or None
        record = await fetch_run(client, view.summary.id)
        view.result = record.result if record is not None else None


async def _running(client: Client, steps: list[StepView]) -> None:
    """Pending steps a worker runs now: `running`, on which worker (as `taskq task` says of
    a plain task: from the workers' heartbeats), and their latest progress report."""
    pending = {s.id: s for s in steps if s.kind == "run" and s.state == "pending"}
    if not pending:
        return
    for worker in await list_workers(client):
        for task in worker.running:
            if task.id in pending:
                pending[task.id].state, pending[task.id].running_on = "running", worker.id
    running = [s for s in pending.values() if s.running_on][:RECORDS_AT_ONCE]
    reports = await asyncio.gather(*(latest(client, s.id) for s in running))
    for step, report in zip(running, reports, strict=True):
        step.progress = report.model_dump() if report is not None else None


async def _timed(client: Client, step: StepView) -> None:
    """A step's attempts and times from its task's record; a child's from its summary."""
    if step.kind == "run":
        record = await fetch(client, step.id)
        if record is not None:
            step.attempts = record.attempts
            step.started_at = record.started_at
            step.ended_at = record.updated_at if record.state != "failed" else None
    elif step.kind == "child":
        summary = await store.load_summary(client, step.id)
        if summary is not None:
            step.started_at = summary.started_at or None
            step.ended_at = summary.updated_at if summary.state in store.FINAL else None


async def journal_last(client: Client, run_id: str) -> int:
    """The sequence of the last event stored in the run's journal (0: none): one batched
    direct get of each journal subject's last message, for telling that a run changed."""
    within = client.names.journal_filter(safe_id(run_id))
    newest = await client.connection.messages.newest(client.names.workflows_stream, within)
    return newest.seq if newest is not None else 0


def _state(command: Event, value: Any, error: BaseException | None) -> tuple[str, Any]:
    if error is not None:
        return ("cancelled" if type(error).__name__ == "TaskCancelled" else "dead"), None
    if command.kind == "sleep":
        return "fired", None
    if command.kind == "wait":
        return ("received" if value is not None else "timed out"), value
    return "succeeded", value
