"""A durable workflow run's decisions: read its journal, replay its code, record the round,
carry the new commands out; and what the steps, timers and signals append to wake it.

A decision is an ordinary task message of the workflow's queue (task name: the workflow's
name, argument: the run id), published whenever something the run may wait for happened (a
step or child ended, a timer fired, a signal or cancel came), deduplicated per cause. So a
sleeping or waiting run holds no worker and no lease, and resumes on any worker. Its round
is appended with compare-and-set: two decisions of one run at once cannot both record one;
the loser reads again and decides on what is new. Commands are carried out after their
round is stored, every publish deduplicated by the command's id, so a decision redelivered
after a crash (within the duplicate window) carries them out again safely.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from taskq.client import Client
from taskq.errors import (
    ArgumentsError,
    NonFiniteFloat,
    PayloadTooLarge,
    TransientError,
    WorkflowTimeout,
)
from taskq.ids import safe_id
from taskq.records.clock import format_epoch, now_iso, parse_time
from taskq.records.envelope import Envelope
from taskq.states import DEAD
from taskq.workflows import store
from taskq.workflows.cancelling import cancelled_end, carry_cancel, grace_over
from taskq.workflows.end import finish, home, mark_waiting
from taskq.workflows.journal import (
    MAX_EVENTS,
    MAX_JOURNAL_BYTES,
    WRITERS,
    Definition,
    Event,
    child_of,
    error_details,
    of_generation,
    retried,
    step_id,
)
from taskq.workflows.journal import Outcome as CodeOutcome
from taskq.workflows.replay import Replayer, carried_out
from taskq.workflows.replayers import kept
from taskq.workflows.state import SECRET, RunStepState, child_secret
from taskq.workflows.steps import digest
from taskq.workflows.store import MULTI_LAST
from taskq.workflows.wake import SKEW, Trigger, start_run, timer_cause, trigger
from taskq.workflows.workflow import Workflow

log = logging.getLogger("taskq.worker")
CONFLICTS = 20  # rounds lost to a concurrent decision before this one gives up (retried)


@dataclass(frozen=True)
class Attempt:
    """The decision's own task message: its id and attempt number."""

    id: str
    number: int


async def decide(
    client: Client, definition: Definition, run_id: str, fired: int, attempt: Attempt
) -> None:
    """One decision of run `run_id` (a timer of command `fired` fired first, if >= 0:
    appended once per timer message, `attempt.id`)."""
    await store.ensure_workflows(client)
    redelivered = attempt.number > 1
    timer = Fired(fired, f"{safe_id(attempt.id)}.fired") if fired >= 0 else None
    async with kept(client).deciding(run_id):
        for _ in range(CONFLICTS):
            if await _decide_once(client, definition, run_id, redelivered, timer):
                return
    raise TransientError(f"workflow run {run_id}: {CONFLICTS} decisions in a row lost the race")


@dataclass
class Fired:
    """A timer the decision's message says fired: command `n`, appended once (`msg_id`)."""

    n: int
    msg_id: str
    checked: bool = False


async def _decide_once(
    client: Client, definition: Definition, run_id: str, redelivered: bool, timer: Fired | None
) -> bool:
    """Decide on what is new; False when a concurrent decision recorded its round first."""
    replayer, events = await _load(client, definition, run_id)
    if replayer is None:
        return True  # no such run (or not this workflow's): nothing to decide
    replayer.feed(events)
    if timer is not None and not timer.checked:
        timer.checked = True
        if _timer_due(replayer, timer.n):
            await _fire(client, replayer, timer)
    retrying = _retry_pending(events)
    round_ = None if replayer.finished else _round(replayer, force=retrying)
    if round_ is None:
        if redelivered:  # its decision may have died before carrying its round out
            await _carry_out_again(client, definition, run_id, replayer)
        kept(client).keep(replayer)
        return True
    recorded = await _record(client, run_id, round_, replayer)
    if recorded is None:
        replayer.close()  # another decision recorded first: start over from the journal
        return False
    commands = recorded.commands
    if redelivered or retrying:  # the crash may have come before earlier rounds' were sent
        commands = _unresolved(replayer)
    await _carry_out(client, definition, run_id, round_, replayer, commands)
    kept(client).keep(replayer)  # the next decision here replays only what is new
    return True


async def _record(
    client: Client, run_id: str, round_: Event, replayer: Replayer
) -> store.Recorded | None:
    """Append the round after what the replayer saw (None: another decision came first);
    the replayer then knows it as its own."""
    try:
        recorded = await store.record_round(client, run_id, round_, replayer.written)
    except (PayloadTooLarge, NonFiniteFloat, store.Unjournalable) as exc:
        # a command or the run's end the journal cannot hold: the run cannot go on
        round_.details.update(commands=[], end={"state": DEAD, "error": error_details(exc)})
        seq = await store.append_after(client, run_id, round_, replayer.written)
        recorded = None if seq is None else store.Recorded(seq, [])
    if recorded is not None:
        replayer.recorded.extend(recorded.commands)
        replayer.written = recorded.seq
        replayer.own.add(recorded.seq)
        if "end" in round_.details:
            replayer.finished, replayer.end = True, dict(round_.details["end"])
    return recorded


async def _carry_out_again(
    client: Client, definition: Definition, run_id: str, replayer: Replayer
) -> None:
    """A redelivered decision with nothing new to record: what the journal's rounds say
    is done again (its worker may have died between recording a round and carrying it
    out), every publish deduplicated: the run's end, or its commands still unresolved."""
    if replayer.end is not None:
        await finish(client, definition, run_id, replayer.end, replayer)
    elif not replayer.finished:
        await _carry_out(client, definition, run_id, _NOTHING, replayer, _unresolved(replayer))


_NOTHING = Event.make("decided", commands=[])  # no new round: only what is recorded goes out


def _unresolved(replayer: Replayer) -> list[Event]:
    """The recorded commands still without their outcome: a decision redelivered after a
    crash publishes them again (each publish deduplicated by the command's id)."""
    return [c for c in replayer.recorded if carried_out(c) and replayer.outcome(c) is None]


async def _load(
    client: Client, definition: Definition, run_id: str
) -> tuple[Replayer | None, list[Event]]:
    """The run's replayer (kept, or made) and the events it has not seen yet, as replay
    sees them after any retry (its last workers' event counts all the same: a round is
    appended after it)."""
    replayer = kept(client).take(run_id)
    raw = await store.read(
        client, run_id, after=replayer.seen if replayer else 0, long=_long(replayer)
    )
    if replayer is not None and any(e.kind in ("start", "retry") for e in raw):
        replayer.close()  # purged and started anew, or retried: replayed from its start
        replayer, raw = None, await store.read(client, run_id)
    if replayer is not None:
        events = [e for e in raw if of_generation(run_id, e, replayer.retries)]
    else:
        events, retries = retried(run_id, raw)
        replayer = _start(definition, run_id, events)
        if replayer is None:
            return None, events
        replayer.clock = client.clock
        replayer.retries = retries
        replayer.timeout = definition.timeout
        replayer.cancel_grace = definition.cancel_grace
        replayer.deadline = _deadline(definition, events, client.clock.time())
    replayer.written = max([replayer.written, *(e.seq for e in raw if e.writer == "w")])
    return replayer, events


def _deadline(definition: Definition, events: list[Event], now: float) -> float | None:
    """When the run times out: its workflow's timeout after its start or its last retry,
    as the server stored them (a start's own `at` is the producer's word)."""
    if not definition.timeout:
        return None
    began = [e.stored_at for e in events if e.kind in ("start", "retry") and e.stored_at]
    return (began[-1] if began else now) + definition.timeout


def _long(replayer: Replayer | None) -> bool:
    """Whether the run's journal is known to hold more events than one multi_last get
    answers (store.read then reads in stream order at once)."""
    return replayer is not None and len(replayer.visible) + len(replayer.recorded) > MULTI_LAST


def _retry_pending(events: list[Event]) -> bool:
    """A retry came after the last recorded round: the failed steps go out again."""
    retries = [e.seq for e in events if e.kind == "retry"]
    rounds = [e.seq for e in events if e.kind == "decided"]
    return bool(retries) and (not rounds or retries[-1] > rounds[-1])


def _timer_due(replayer: Replayer, n: int) -> bool:
    """Whether command `n` of the run is a timer due now: a decision message claiming a
    timer fired (any producer may publish one) fires nothing early, and no step."""
    for command in replayer.recorded:
        if command.n == n and command.kind in ("sleep", "wait"):
            until = command.details.get("until")
            due = parse_time(str(until)).timestamp() if until else None
            return due is not None and due <= replayer.clock.time() + SKEW
    return False


async def _fire(client: Client, replayer: Replayer, timer: Fired) -> None:
    """Append the timer's `fired` and feed it: appended only if nothing came after what the
    replayer saw, it is all that is new (no read); else appended anyway, and read with the
    rest."""
    fired = Event.make("fired", timer.n)
    seq = await store.append_if_last(client, replayer.run_id, fired, timer.msg_id, replayer.seen)
    if seq is not None:
        replayer.feed([dataclasses.replace(fired, seq=seq, writer=WRITERS["fired"])])
        return
    await store.append(client, replayer.run_id, fired, timer.msg_id)
    replayer.feed(await _news(client, replayer))


async def _news(client: Client, replayer: Replayer) -> list[Event]:
    """The run's events after those `replayer` has seen, of its generation."""
    raw = await store.read(client, replayer.run_id, after=replayer.seen, long=_long(replayer))
    return [e for e in raw if of_generation(replayer.run_id, e, replayer.retries)]


def _start(definition: Definition, run_id: str, events: list[Event]) -> Replayer | None:
    if not events or events[0].kind != "start":
        return None
    start = events[0].details
    if start.get("workflow") != definition.name:
        return None
    stored = events[0].stored_at  # the server's time, not a field the producer wrote
    replayer = Replayer(run_id, started_at=format_epoch(stored) if stored else now_iso())
    secret = start.get("secret")
    replayer.secret = secret if isinstance(secret, str) and SECRET.fullmatch(secret) else None
    parent = start.get("parent")
    if isinstance(parent, dict):
        replayer.parent, replayer.parent_step = str(parent.get("id")), parent
    args, kwargs = start.get("args", []), start.get("kwargs", {})
    try:  # the start is a producer's: its arguments fit the code, or the run fails
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ArgumentsError(definition.name, "args must be a list, kwargs an object")
        args, kwargs = definition.validator.for_call(args, kwargs)
    except ArgumentsError as exc:
        replayer.ended = CodeOutcome(error=exc)
        return replayer
    replayer.code = definition.fn(Workflow(run_id, replayer), *args, **kwargs)
    return replayer


def _round(replayer: Replayer, force: bool = False) -> Event | None:
    """This decision's round: the commands made beyond the journal and the run's end (a
    cancel reaches the code as CancelledError; the run ends cancelled when the code ends or
    its grace is over); None when there is nothing to record."""
    late = replayer.deadline is not None and replayer.clock.time() >= replayer.deadline
    made = [] if late or grace_over(replayer) else replayer.decide()
    end = _end(replayer)
    if end is None and late:
        timeout = WorkflowTimeout(replayer.run_id, replayer.timeout or 0.0)
        end = {"state": DEAD, "error": error_details(timeout)}
    events = len(replayer.visible) + len(replayer.made) + replayer.junk
    if end is None and _full(replayer, events):  # its commands are not recorded: it holds
        made = []
        full = store.JournalFull(replayer.run_id, events, MAX_EVENTS, replayer.size)
        end = {"state": DEAD, "error": error_details(full)}
    if not made and end is None and not force:
        return None
    details: dict[str, Any] = {
        "upto": replayer.seen,
        "at": replayer.clock.time(),
        "commands": made,
    }
    if end is not None:
        details["end"] = end
    return Event.make("decided", **details)


def _full(replayer: Replayer, events: int) -> bool:
    """Whether this round would take the run's journal past a limit (its events, or its
    bytes); warns once at 80%."""
    near = events > 0.8 * MAX_EVENTS or replayer.size > 0.8 * MAX_JOURNAL_BYTES
    if near and not replayer.warned:
        replayer.warned = True
        log.warning(
            "workflow run %s has %d journal events of %d bytes, the limits are %d and %d: "
            "past one the run fails with JournalFull (split the work into child workflows "
            "or wf.map)",
            replayer.run_id,
            events,
            replayer.size,
            MAX_EVENTS,
            MAX_JOURNAL_BYTES,
        )
    return events > MAX_EVENTS or replayer.size > MAX_JOURNAL_BYTES


def _end(replayer: Replayer) -> dict[str, Any] | None:
    if replayer.cancel_seen:
        end = cancelled_end(replayer)
        if end is not None or replayer.cancel_at >= 0:  # ended cancelled, or compensating
            return end
    ended = replayer.ended
    if ended is None:
        return None
    if ended.error is not None:
        return {"state": DEAD, "error": error_details(ended.error)}
    return {"state": "succeeded", "value": ended.value}


async def _carry_out(
    client: Client,
    definition: Definition,
    run_id: str,
    round_: Event,
    replayer: Replayer,
    commands: list[Event],
) -> None:
    """Publish the round's steps and timers (`commands`: for a redelivered decision, those
    of any recent round still unresolved too), then the run's end or its waiting state."""
    here = home(definition, run_id, replayer)
    for command in filter(carried_out, commands):
        await _command(client, here, command, replayer.retries)
    end = round_.details.get("end")
    if end is not None:
        await finish(client, definition, run_id, end, replayer)
        return
    if replayer.deadline is not None and not replayer.deadline_set:
        eta = format_epoch(replayer.deadline)  # a decision then ends the run if it is still going
        await trigger(client, here, Trigger(f"deadline{replayer.retries}", eta))
        replayer.deadline_set = True
    await carry_cancel(client, here, replayer)
    await mark_waiting(client, definition, run_id, replayer)


async def _command(client: Client, here: RunStepState, command: Event, retries: int) -> None:
    details, n = command.details, command.n
    if command.kind == "run":
        step = Envelope(
            id=step_id(here.id, n, retries),
            task=str(details["task"]),
            args=list(details.get("args", [])),
            kwargs=dict(details.get("kwargs", {})),
            enqueued_at=now_iso(),
            workflow=here.model_copy(update={"n": n, "at": command.seq}),
        )
        # the call's digest, and one of the run's secret: its id cannot be taken first
        called = digest(step.task, step.args, step.kwargs)
        msg_id = f"{step.id}.{called}.{here.digest(called)}"
        await client.publish_envelope(step, str(details["queue"]), msg_id=msg_id)
    elif command.kind in ("sleep", "wait") and details.get("until"):
        await trigger(client, here, Trigger(timer_cause(n, retries), str(details["until"]), n))
    elif command.kind == "child":
        parent, child = here.model_copy(update={"n": n}), child_of(here.id, command, retries)
        await start_run(client, child, details, parent, child_secret(here.tag, child))
