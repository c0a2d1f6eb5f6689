"""Durable workflow runs as operators see them, from the server alone (no App needed): the
runs listed by state and name, one run with its steps, timers and signals, and a signal or
cancel sent to a run by its id (`taskq workflows`, the dashboard, `WorkflowRun`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taskq.client import Client
from taskq.errors import ConfigError, NotFound
from taskq.ids import new_id, safe_id
from taskq.records.clock import now_iso
from taskq.records.results import ResultRecord, fetch
from taskq.records.results import store as store_result
from taskq.workflows import store
from taskq.workflows.journal import (
    MAX_EVENT_BYTES,
    Event,
    child_id,
    outcome_of,
    retried,
    step_id,
)
from taskq.workflows.state import RunStepState
from taskq.workflows.wake import Trigger, trigger

Target = tuple[str, str] | None  # a run's (workflow, queue), when the caller knows them
LISTED = 1000  # runs one listing shows, at most (newest first)


async def list_runs(
    client: Client, state: str | None = None, name: str | None = None, limit: int = 100
) -> list[store.RunSummary]:
    """Runs newest first, filtered by `state` and workflow `name`."""
    if state is not None and state not in store.STATES:
        raise ConfigError(f"a run's state is one of {', '.join(store.STATES)}, not {state!r}")
    await store.ensure_workflows(client)
    found = []
    for entry in await client.connection.kv.entries(client.names.runs_bucket):
        summary = store.parse_summary(entry.value)
        if summary is None or (state and summary.state != state):
            continue
        if name and summary.name != name:
            continue
        found.append(summary)
    found.sort(key=lambda s: s.started_at, reverse=True)
    return found[: min(limit, LISTED)]


@dataclass
class StepView:
    """One command of a run, as `taskq workflows show` tells it."""

    n: int
    kind: str  # run, child, sleep, wait, now, uuid, random, patch
    target: str  # the task, child workflow or signal name
    id: str  # a step's task id, a child's run id
    state: str  # pending, succeeded, failed, cancelled, fired, received, timed out
    made_at: float = 0.0
    result: Any = None
    error: dict[str, Any] | None = None
    attempts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RunView:
    """One run: its summary, its steps in order, and the signals it was sent."""

    summary: store.RunSummary
    steps: list[StepView] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.summary.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
            "signals": self.signals,
        }


async def show_run(client: Client, run_id: str) -> RunView:
    """A run with every step (task id, state, attempts, result or error), timer and signal."""
    summary = await store.load_summary(client, run_id)
    if summary is None:
        raise NotFound(f"no workflow run {run_id}")
    events, retries = retried(run_id, await store.read(client, run_id))
    visible = [e for e in events if e.kind in ("done", "fired", "signal", "cancel")]
    made: list[tuple[Event, float]] = [
        (command, float(e.details.get("at", 0.0)))
        for e in events
        if e.kind == "decided"
        for command in e.details.get("commands", [])
    ]
    commands = [c for c, _ in made]
    view = RunView(summary)
    for command, at in made:
        step = await _step(client, run_id, command, at, visible, commands, retries)
        view.steps.append(step)
    view.signals = [
        {
            "name": e.details.get("name"),
            "payload": e.details.get("payload"),
            "at": e.details.get("at"),
        }
        for e in events
        if e.kind == "signal"
    ]
    return view


async def _step(
    client: Client,
    run_id: str,
    command: Event,
    at: float,
    visible: list[Event],
    made: list[Event],
    retries: int,
) -> StepView:
    details = command.details
    target = str(details.get("task") or details.get("workflow") or details.get("name") or "")
    done = next((e for e in visible if e.kind == "done" and e.n == command.n), None)
    ids = {
        "run": step_id(run_id, command.n, retries),
        "child": child_id(run_id, command.n, retries),
    }
    shown = str(done.details.get("id")) if done is not None else ids.get(command.kind, "")
    view = StepView(command.n, command.kind, target, shown, "pending", at)
    outcome = outcome_of(run_id, command, visible, made)
    if outcome is not None:
        view.state, view.result = _state(command, outcome.value, outcome.error)
        if outcome.error is not None:
            view.error = {"type": type(outcome.error).__name__, "message": str(outcome.error)}
    if command.kind == "run":
        record = await fetch(client, shown)
        view.attempts = record.attempts if record is not None else 0
    return view


def _state(command: Event, value: Any, error: Exception | None) -> tuple[str, Any]:
    if error is not None:
        return ("cancelled" if type(error).__name__ == "TaskCancelled" else "failed"), None
    if command.kind == "sleep":
        return "fired", None
    if command.kind == "wait":
        return ("received" if value is not None else "timed out"), value
    return "succeeded", value


async def send_signal(
    client: Client, run_id: str, name: str, payload: Any, target: Target = None
) -> None:
    """Append a signal to the run's journal and wake it (kept until the run waits for it).
    `target`: the run's (workflow, queue) when known; else read from the server."""
    if not isinstance(name, str) or not name or len(name) > 128:
        raise ConfigError(f"a signal name is 1 to 128 characters, not {str(name)[:80]!r}")
    here = await _here(client, run_id, target)
    event = Event.make("signal", name=name, payload=payload, at=now_iso())
    if len(store.encoded(event)) > MAX_EVENT_BYTES:
        raise ConfigError(f"a signal's payload is at most {MAX_EVENT_BYTES} bytes")
    seq = await store.append(client, run_id, event, new_id())
    await trigger(client, here, Trigger(f"g{seq}"))


async def cancel_run(client: Client, run_id: str, target: Target = None) -> None:
    """Ask the run to end cancelled: its running steps and children are cancelled."""
    here = await _here(client, run_id, target)
    event = Event.make("cancel", at=now_iso())
    seq = await store.append(client, run_id, event, f"{safe_id(run_id)}.cancel")
    await trigger(client, here, Trigger(f"c{seq}"))


async def retry_run(client: Client, run_id: str) -> None:
    """Resume a failed run from its failed step, keeping every completed step (after a code
    fix): what followed the failure is voided (taskq.workflows.journal.retried), the failed
    steps run again under new ids, and the run is `running` until it ends again."""
    summary = await store.load_summary(client, run_id)
    if summary is None:
        await _here(client, run_id)  # NotFound, unless it started and waits for a decision
    state = summary.state if summary is not None else "running"
    if summary is None or summary.state != "failed":
        raise ConfigError(f"only a failed run can be retried; run {run_id} is {state}")
    here = RunStepState(id=run_id, n=0, workflow=summary.name, queue=summary.queue)

    def reopen(found: store.RunSummary | None) -> store.RunSummary | None:
        if found is None or found.state != "failed":
            return None
        return found.model_copy(update={"state": "running", "error": None})

    await store.update_summary(client, run_id, reopen)
    waiting = ResultRecord(state="failed", task=summary.name, reason="retried", queue=summary.queue)
    await store_result(client, run_id, waiting)  # `result()` waits for the new end
    seq = await store.append(client, run_id, Event.make("retry", at=now_iso()), new_id())
    await trigger(client, here, Trigger(f"r{seq}"))


async def _here(client: Client, run_id: str, target: Target = None) -> RunStepState:
    """Where the run's decisions go: as given, else from its summary, else (a run no
    decision took yet) from its start event, which only roles that read journals see."""
    if target is None:
        summary = await store.load_summary(client, run_id)
        if summary is not None:
            target = (summary.name, summary.queue)
    if target is None:
        events = await store.read(client, run_id)
        start = events[0].details if events and events[0].kind == "start" else None
        if start is None:
            raise NotFound(f"no workflow run {run_id}")
        target = (str(start["workflow"]), str(start["queue"]))
    return RunStepState(id=run_id, n=0, workflow=target[0], queue=target[1])
