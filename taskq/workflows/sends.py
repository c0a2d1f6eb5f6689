"""What is sent to a durable run from outside, by its id (`WorkflowRun`, `taskq workflows
signal|cancel|retry`, the dashboard): a signal, a cancel, a retry. A signal or cancel for a
run that has ended is refused (RunEnded): nothing would read it."""

from __future__ import annotations

import secrets
from typing import Any

from taskq.client import Client
from taskq.errors import ConfigError, NonFiniteFloat, NotFound, PayloadTooLarge, RunEnded
from taskq.ids import new_id
from taskq.records.clock import now_iso
from taskq.records.results import ResultRecord, run_key
from taskq.records.results import store as store_result
from taskq.states import DEAD
from taskq.workflows import store
from taskq.workflows.journal import MAX_EVENT_BYTES, Event
from taskq.workflows.state import RunStepState
from taskq.workflows.wake import Trigger, trigger

Target = tuple[str, str] | None  # a run's (workflow, queue), when the caller knows them


async def send_signal(
    client: Client, run_id: str, name: str, payload: Any, target: Target = None
) -> None:
    """Append a signal to the run's journal and wake it (kept until the run waits for it).
    `target`: the run's (workflow, queue) when known; else read from the server."""
    if not isinstance(name, str) or not name or len(name) > 128:
        raise ConfigError(f"a signal name is 1 to 128 characters, not {str(name)[:80]!r}")
    here = await _here(client, run_id, target, live=True)
    event = Event.make("signal", name=name, payload=payload, at=now_iso())
    try:
        store.encoded(event)
    except PayloadTooLarge:
        raise ConfigError(
            f"a signal's payload is at most {MAX_EVENT_BYTES:,} bytes of JSON"
        ) from None
    except (NonFiniteFloat, store.Unjournalable) as exc:
        raise ConfigError(f"a signal's payload cannot be sent: {exc}") from None
    seq = await store.append(client, run_id, event, secrets.token_hex(16))
    await trigger(client, here, Trigger(f"g{seq}"))


async def cancel_run(client: Client, run_id: str, target: Target = None) -> None:
    """Ask the run to end cancelled: its running steps and children are cancelled. The
    cancel's subject is random: a subject anyone could compute could be taken first."""
    here = await _here(client, run_id, target, live=True)
    event = Event.make("cancel", at=now_iso())
    seq = await store.append(client, run_id, event, secrets.token_hex(16))
    await trigger(client, here, Trigger(f"c{seq}"))


async def retry_run(client: Client, run_id: str) -> None:
    """Resume a failed run from its failed step, keeping every completed step (after a code
    fix): what followed the failure is voided (taskq.workflows.journal.retried), the failed
    steps run again under new ids, and the run is `running` until it ends again."""
    summary = await store.load_summary(client, run_id)
    if summary is None:
        await _here(client, run_id)  # NotFound, unless it started and waits for a decision
    state = summary.state if summary is not None else "running"
    if summary is None or summary.state != DEAD:
        raise ConfigError(f"only a dead run can be retried; run {run_id} is {state}")
    here = RunStepState(id=run_id, n=0, workflow=summary.name, queue=summary.queue)

    def reopen(found: store.RunSummary | None) -> store.RunSummary | None:
        if found is None or found.state != DEAD:
            return None
        return found.model_copy(update={"state": "running", "error": None})

    await store.update_summary(client, run_id, reopen)
    waiting = ResultRecord(state="failed", task=summary.name, reason="retried", queue=summary.queue)
    await store_result(client, run_id, waiting, run_key(run_id))  # `result()` waits for the new end
    seq = await store.append(client, run_id, Event.make("retry", at=now_iso()), new_id())
    await trigger(client, here, Trigger(f"r{seq}"))


async def _here(
    client: Client, run_id: str, target: Target = None, live: bool = False
) -> RunStepState:
    """Where the run's decisions go: as given, else from its summary, else (a run no
    decision took yet) from its start event, which only roles that read journals see.
    `live`: RunEnded when its summary says it has ended (a signal or cancel would be read
    by nothing)."""
    if target is None or live:
        summary = await store.load_summary(client, run_id)
        if live and summary is not None and summary.state in store.FINAL:
            raise RunEnded(run_id, summary.state)
        if target is None and summary is not None:
            target = (summary.name, summary.queue)
    if target is None:
        events = await store.read(client, run_id)
        start = events[0].details if events and events[0].kind == "start" else None
        if start is None:
            raise NotFound(f"no workflow run {run_id}")
        target = (str(start.get("workflow", "")), str(start.get("queue", "")))
    return RunStepState(id=run_id, n=0, workflow=target[0], queue=target[1])
