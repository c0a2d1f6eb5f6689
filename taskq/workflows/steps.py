"""A durable workflow run's steps as workers see them: whether a step message is one its
run's decision published, and the step's outcome into the run's journal when it ends.

Producers may publish to a workflow's queue (they start runs), so a step message is only
taken for step `n` of a run when the journal message it names (`RunStepState.at`, a round
or a chunk on the subject only workers may write) holds a `run` command `n` for the same
task and arguments; anything else is dead-lettered unrun, its outcome recorded nowhere. A
step's message id carries a digest of its call, so a forgery under the same task id is a
different message: it cannot shadow the real step by JetStream's deduplication.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from typing import Any

from pydantic_core import to_json

from taskq.client import Client
from taskq.errors import DecodeError, NonFiniteFloat, StorageFull, TransientError
from taskq.ids import safe_id
from taskq.policy import Ack, Cancel, Dead, Decision, Failure, Outcome, Success
from taskq.records.envelope import Envelope
from taskq.retrying import retry_transient
from taskq.workflows import store
from taskq.workflows.journal import Event
from taskq.workflows.state import RunStepState
from taskq.workflows.wake import Trigger, trigger

log = logging.getLogger("taskq.worker")
KEPT_ROUNDS = 64  # journal messages kept decoded per client (a gather's steps share one)
# seconds a step's outcome waits for a store that refuses it (full, or not answering)
# before the step is handed back (run again): a full store is an operator's to free
STORAGE_PATIENCE = 600.0


def digest(task: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    """A step call's digest: part of its message id (same call, same id: a duplicate)."""
    body = to_json([task, args, kwargs], fallback=repr)
    return hashlib.sha256(body).hexdigest()[:16]


async def is_bound(client: Client, envelope: Envelope) -> bool:
    """Whether `envelope` is the step its run's journal commanded: its id is the step's,
    and the journal message it names holds that `run` command with the same call."""
    run = envelope.workflow
    if not isinstance(run, RunStepState) or run.at <= 0:
        return False
    if not re.fullmatch(rf"{re.escape(run.id)}\.{run.n}(r[1-9][0-9]*)?", envelope.id):
        return False
    command = next((c for c in await _commands_at(client, run) if c.n == run.n), None)
    if command is None or command.kind != "run":
        return False
    details = command.details
    return (
        details.get("task") == envelope.task
        and details.get("args", []) == envelope.args
        and details.get("kwargs", {}) == envelope.kwargs
    )


async def ended_already(client: Client, envelope: Envelope) -> bool:
    """Whether the run's journal holds this step's outcome already: its worker died after
    writing it, before the ack, or a restarted server that had not yet stored the ack
    delivers the step as new (as a first delivery: so this is asked of every one). One
    direct get of the outcome's own subject. When it is there, the run's next decision is
    published again (deduplicated): the worker that wrote it may have died before."""
    run = envelope.workflow
    assert isinstance(run, RunStepState)
    seq = await store.find(client, run.id, "done", _outcome_id(envelope))
    if seq is None:
        return False
    await trigger(client, run, Trigger(f"s{seq}"))
    return True


def _outcome_id(envelope: Envelope) -> str:
    """The message id of a step's outcome in its run's journal (its subject's digest)."""
    return f"{safe_id(envelope.id)}.done"


async def _commands_at(client: Client, run: RunStepState) -> list[Event]:
    """The commands of the round or chunk stored at `run.at` on the run's own journal
    (empty when nothing a worker wrote is there)."""
    key, rounds = (run.id, run.at), _rounds(client)
    found = rounds.get(key)
    if found is not None:
        rounds.move_to_end(key)
        return found
    names = client.names
    # read by sequence alone: a filtered read from a sequence another run (or no run) holds
    # would scan the stream on to the next match, for any number a message names
    stored = await client.connection.messages.get(names.workflows_stream, run.at)
    home = names.journal_filter(safe_id(run.id)).removesuffix("*.*")
    commands: list[Event] = []
    if stored is not None and stored.subject.startswith(home):
        try:
            event = store.decoded(stored.data, run.at, stored.subject)
        except DecodeError:
            event = None
        if event is not None and event.kind in ("decided", "chunk"):
            commands = list(event.details.get("commands", []))
    rounds[key] = commands
    while len(rounds) > KEPT_ROUNDS:
        rounds.popitem(last=False)
    return commands


def _rounds(client: Client) -> OrderedDict[tuple[str, int], list[Event]]:
    """The rounds this client read last, decoded (the client's: never process-wide)."""
    return client.cached("rounds", OrderedDict)


async def step_ended(
    client: Client,
    envelope: Envelope,
    decision: Decision,
    outcome: Outcome | None,
) -> None:
    """A step of a run settled for good (before its ack): its outcome into the run's
    journal, then the run's next decision (both deduplicated: a redelivered step repeats
    nothing). A store that refuses them (full, or not answering) is waited out for up to
    STORAGE_PATIENCE seconds, the step's lease kept meanwhile by the worker (it holds one
    until the message is settled): storage pressure must not run a completed step again,
    nor spend its attempts."""
    run = envelope.workflow
    if not isinstance(run, RunStepState):
        return
    event = _step_event(envelope, decision, outcome)
    if event is None:
        return  # a retry: the step is not over
    try:
        seq = await _journaled(client, run, event, _outcome_id(envelope))
    except (store.Unjournalable, NonFiniteFloat) as exc:  # it cannot be read back: failed
        seq = await _journaled(client, run, _unjournalable(envelope, exc), _outcome_id(envelope))
    log.debug("step %s of run %s ended (journal %d)", run.n, run.id, seq)


async def _journaled(
    client: Client,
    run: RunStepState,
    event: Event,
    msg_id: str,
) -> int:
    """Append a step's outcome and wake its run; while the store refuses, wait (the
    step's lease kept), STORAGE_PATIENCE seconds at most. Its journal sequence."""

    async def record() -> int:
        await store.ensure_workflows(client)
        seq = await store.append(client, run.id, event, msg_id)
        await trigger(client, run, Trigger(f"s{seq}"))  # once per outcome (a retry's too)
        return seq

    try:
        return await record()
    except (StorageFull, TransientError) as exc:
        log.warning("step %s of run %s: its outcome waits for the store (%s)", run.n, run.id, exc)
    return await retry_transient(
        record,
        deadline=STORAGE_PATIENCE,
        what=f"step {run.n} of run {run.id}: its outcome",
        level=logging.DEBUG,
        also=(StorageFull,),
    )


def _unjournalable(envelope: Envelope, exc: Exception) -> Event:
    """A failed outcome for a step whose own could not be journaled."""
    run = envelope.workflow
    assert isinstance(run, RunStepState)
    info = {"type": type(exc).__name__, "message": str(exc), "traceback": ""}
    return Event.make(
        "done", run.n, id=envelope.id, ok=False, state="dead", reason="permanent", error=info
    )


def _step_event(envelope: Envelope, decision: Decision, outcome: Outcome | None) -> Event | None:
    run = envelope.workflow
    assert isinstance(run, RunStepState)
    if isinstance(decision, Ack):
        value = outcome.value if isinstance(outcome, Success) else None
        return Event.make("done", run.n, id=envelope.id, ok=True, value=value)
    if isinstance(decision, Cancel | Dead):
        error = outcome.error if isinstance(outcome, Failure) else None
        reason = decision.reason if isinstance(decision, Dead) else "cancelled"
        state = "dead" if isinstance(decision, Dead) else "cancelled"
        info = {
            "type": type(error).__name__
            if error
            else ("TaskCancelled" if state == "cancelled" else ""),
            "message": str(error) if error else getattr(decision, "detail", ""),
            "traceback": outcome.traceback if isinstance(outcome, Failure) else "",
        }
        return Event.make(
            "done", run.n, id=envelope.id, ok=False, state=state, reason=reason, error=info
        )
    return None
