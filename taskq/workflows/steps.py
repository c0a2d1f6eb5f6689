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
from taskq.errors import DecodeError
from taskq.ids import safe_id
from taskq.policy import Ack, Cancel, Dead, Decision, Failure, Outcome, Success
from taskq.records.envelope import Envelope
from taskq.workflows import store
from taskq.workflows.journal import Event
from taskq.workflows.state import RunStepState
from taskq.workflows.wake import Trigger, trigger

log = logging.getLogger("taskq.worker")
KEPT_ROUNDS = 64  # journal messages kept decoded per process (a gather's steps share one)
_kept: OrderedDict[tuple[str, int], list[Event]] = OrderedDict()


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
    writing it, before the ack. Asked of a redelivered step only (a read of the journal)."""
    run = envelope.workflow
    assert isinstance(run, RunStepState)
    return any(
        event.kind == "done" and event.n == run.n and event.details.get("id") == envelope.id
        for event in await store.read(client, run.id)
    )


async def _commands_at(client: Client, run: RunStepState) -> list[Event]:
    """The commands of the round or chunk stored at `run.at` on the run's own journal
    (empty when nothing a worker wrote is there)."""
    key = (run.id, run.at)
    found = _kept.get(key)
    if found is not None:
        _kept.move_to_end(key)
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
    _kept[key] = commands
    while len(_kept) > KEPT_ROUNDS:
        _kept.popitem(last=False)
    return commands


async def step_ended(
    client: Client, envelope: Envelope, decision: Decision, outcome: Outcome | None
) -> None:
    """A step of a run settled for good (before its ack): its outcome into the run's
    journal, then the run's next decision (both deduplicated: a redelivered step repeats
    nothing)."""
    run = envelope.workflow
    if not isinstance(run, RunStepState):
        return
    event = _step_event(envelope, decision, outcome)
    if event is None:
        return  # a retry: the step is not over
    await store.ensure_workflows(client)
    seq = await store.append(client, run.id, event, f"{safe_id(envelope.id)}.done")
    await trigger(client, run, Trigger(f"s{seq}"))  # once per outcome (a retry's too)
    log.debug("step %s of run %s ended (journal %d)", run.n, run.id, seq)


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
