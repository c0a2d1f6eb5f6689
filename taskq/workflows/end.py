"""What a durable workflow run's decisions write besides its journal: the run's state in
its summary while it runs, and at its end the run's result record (under the run's id in
the results bucket, so `run.result()` waits like `handle.result()`), its parent's wake-up,
and the cancelling of what it left running."""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from typing import Any

from taskq.client import Client
from taskq.errors import TaskqError
from taskq.ids import safe_id
from taskq.records.cancels import request as request_cancel
from taskq.records.clock import format_epoch, parse_time
from taskq.records.results import ResultRecord, run_key
from taskq.records.results import store as store_result
from taskq.records.schedules import drop_delayed
from taskq.states import DEAD, LEGACY_RUN
from taskq.workflows import store
from taskq.workflows.journal import Definition, Event, child_of, retried, step_id
from taskq.workflows.replay import Replayer, carried_out
from taskq.workflows.state import RunStepState, child_secret
from taskq.workflows.wake import SKEW, Trigger, decision_id, grace_cause, timer_cause, trigger

log = logging.getLogger("taskq.worker")
WAITED = frozenset({"run", "child", "sleep", "wait"})  # commands a run waits on
RECORDED = {"succeeded": "succeeded", "dead": "dead", "cancelled": "cancelled"}  # run -> record


def home(definition: Definition, run_id: str, replayer: Replayer) -> RunStepState:
    """Where the run's decisions go, with its secret (the ids of what they publish)."""
    return RunStepState(
        id=run_id, n=0, workflow=definition.name, queue=definition.queue, tag=replayer.secret
    )


async def mark_waiting(
    client: Client, definition: Definition, run_id: str, replayer: Replayer
) -> None:
    """The run's state while it waits: sleeping (only timers), waiting (a signal),
    running (steps or children under way) or cancelling (its code got the cancel); written
    only when it changed."""
    while replayer.settled < len(replayer.made) and _done(replayer, replayer.settled):
        replayer.settled += 1  # commands before this one all have their outcome
    pending = [c for c in replayer.made[replayer.settled :] if c.kind in WAITED]
    kinds = {c.kind for c in pending if carried_out(c) and replayer.outcome(c) is None}
    state = "running"
    if replayer.cancel_at >= 0:
        state = "cancelling"  # its code got the cancel, and compensates
    elif kinds == {"sleep"}:
        state = "sleeping"
    elif kinds and kinds <= {"wait", "sleep"}:
        state = "waiting"
    await _summary(client, definition, replayer, state)


def _done(replayer: Replayer, n: int) -> bool:
    command = replayer.made[n]
    waited = command.kind in WAITED and carried_out(command)
    return not waited or replayer.outcome(command) is not None


async def finish(
    client: Client,
    definition: Definition,
    run_id: str,
    end: dict[str, Any],
    replayer: Replayer,
) -> None:
    """The run ended (its round with `end` is stored): its result record, its summary,
    then its steps still running are cancelled and its parent is woken."""
    said = str(end.get("state", DEAD))
    state = LEGACY_RUN.get(said, said)  # an earlier taskq's round says `failed`
    error = end.get("error")
    record = ResultRecord(
        state=RECORDED.get(state, "dead"),
        task=definition.name,
        result=end.get("value"),
        error=error if isinstance(error, dict) else None,
        reason="workflow_failed" if state == DEAD else "",
        queue=definition.queue,
    )
    message = error.get("message") if isinstance(error, dict) else None
    await _summary(client, definition, replayer, state, message)  # final before the result
    await store_result(client, run_id, record, run_key(run_id))
    await cancel_unfinished(client, run_id, replayer)
    await _wake_parent(client, run_id, state, end, replayer.parent_step)
    here = home(definition, run_id, replayer)
    await _drop_timers(client, here, replayer)
    expires = format_epoch(time.time() + client.settings.results_ttl)
    await trigger(client, here, Trigger(f"x{replayer.retries}", expires, expire=True))


async def expire_run(client: Client, run_id: str) -> None:
    """Remove an ended run's journal and summary once it ended `results_ttl` ago (its result
    record expires with the results bucket). A run retried since, or asked to expire early
    (a producer may publish the decision message), is left alone."""
    summary = await store.load_summary(client, run_id)
    if summary is None or summary.state not in store.FINAL or not summary.updated_at:
        return
    ended = parse_time(summary.updated_at).timestamp()
    if ended + client.settings.results_ttl > time.time() + SKEW:
        return
    await store.forget(client, run_id)
    log.info("workflow run %s expired (ended %s)", run_id, summary.updated_at)


async def _drop_timers(client: Client, here: RunStepState, replayer: Replayer) -> None:
    """The ended run's timers that have not fired (its deadline, its sleeps and waits):
    removed, so the schedules list holds no timer of a run that has ended (their ids hold
    a digest of the run's secret: an earlier taskq's run has none, and keeps its timers
    until they fire, which then changes nothing)."""
    if here.tag is None:
        return
    fired = {e.n for e in replayer.visible if e.kind == "fired"}
    whys = [f"deadline{replayer.retries}"] if replayer.deadline is not None else []
    whys += [grace_cause(replayer.retries)] if replayer.cancel_at >= 0 else []
    whys += [
        timer_cause(c.n, replayer.retries)
        for c in replayer.recorded
        if c.kind in ("sleep", "wait") and c.details.get("until") and c.n not in fired
    ]
    for why in whys:
        with contextlib.suppress(TaskqError):  # a timer left fires into an ended run: nothing
            await drop_delayed(client, here.queue, decision_id(here, why))


async def cancel_unfinished(
    client: Client, run_id: str, replayer: Replayer, before: int | None = None
) -> None:
    """Steps still running are cancelled (the durable request every worker follows), and
    children still running are sent a cancel of their own (those made `before` the
    command numbered so, when given)."""
    for command in replayer.recorded:  # made and published (a refused round's are not)
        if before is not None and command.n >= before:
            break
        if not carried_out(command) or replayer.outcome(command) is not None:
            continue
        if command.kind == "run":
            await request_cancel(client, step_id(run_id, command.n, replayer.retries))
        elif command.kind == "child":
            child = child_of(run_id, command, replayer.retries)
            details = command.details
            # a random subject, as every cancel's: one anyone can compute can be taken first
            await store.append(client, child, Event.make("cancel"), secrets.token_hex(16))
            here = RunStepState(
                id=child,
                n=0,
                workflow=str(details["workflow"]),
                queue=str(details["queue"]),
                tag=child_secret(replayer.secret, child) if replayer.secret else None,
            )
            await trigger(client, here, Trigger("cancel"))


async def _summary(
    client: Client,
    definition: Definition,
    replayer: Replayer,
    state: str,
    error: str | None = None,
) -> None:
    """The run's state in its summary (made by its first decision)."""
    run_id = replayer.run_id

    def change(summary: store.RunSummary | None) -> store.RunSummary | None:
        if summary is None:
            summary = store.RunSummary(
                id=run_id,
                name=definition.name,
                queue=definition.queue,
                started_at=replayer.started_at,
                parent=replayer.parent,
            )
        if summary.state in store.FINAL:
            return None  # a late decision does not reopen an ended run
        if summary.state == state and summary.error == error and summary.updated_at:
            return None  # unchanged: one read, no write
        return summary.model_copy(update={"state": state, "error": error})

    await store.update_summary(client, run_id, change)


async def _wake_parent(
    client: Client, run_id: str, state: str, end: dict[str, Any], parent: dict[str, Any] | None
) -> None:
    """A child run's end, into its parent's journal (as a step's would be): `parent` is
    its start's pointer to the parent's command (None: it has no parent)."""
    if parent is None:
        return
    try:
        run = RunStepState.model_validate(parent)
    except ValueError:  # a producer's start may name anything
        log.warning("run %s names a parent that is no run step: left alone", run_id)
        return
    generation = await _is_child_of(client, run, run_id)
    if generation is None:
        log.warning("run %s names %s as its parent, which started no such child", run_id, run.id)
        return  # a forged start (producers may start runs): the parent is not touched
    ok = state == "succeeded"
    details: dict[str, Any] = {"id": run_id, "ok": ok, "gen": generation}
    if ok:
        details["value"] = end.get("value")
    else:
        details.update(state=state, error=end.get("error") or {})
    event = Event.make("done", run.n, **details)
    seq = await store.append(client, run.id, event, f"{safe_id(run_id)}.done")
    await trigger(client, run, Trigger(f"s{seq}"))


async def _is_child_of(client: Client, parent: RunStepState, run_id: str) -> int | None:
    """The generation (retries of `parent`) in which its journal started `run_id` as its
    child `parent.n`; None when it never did."""
    events, retries = retried(parent.id, await store.read(client, parent.id))
    for event in events:
        for command in event.details.get("commands", []) if event.kind == "decided" else []:
            if command.kind == "child" and command.n == parent.n:
                return next(
                    (k for k in range(retries + 1) if child_of(parent.id, command, k) == run_id),
                    None,
                )
    return None
