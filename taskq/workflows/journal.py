"""A durable workflow run's journal: its events, as stored one message each on the run's
subject of the workflows stream, and what each command's outcome is among them (pure).

Events, in the order the server stored them:
- `start`: the run's workflow, arguments and queue (its first message);
- `decided`: one decision's round, appended atomically (one message, published only if the
  journal is still as the decision read it): `upto`, the last event the code had seen, the
  `commands` it made then (each with its number `n`), and `end` when the code returned or
  raised;
- `done` (a step's or child's outcome, `n`), `fired` (a timer of `n` fired), `signal` (a
  named payload sent to the run), `cancel`: appended by others at any time.
"""

from __future__ import annotations

import hashlib
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from taskq.arguments import ArgsValidator
from taskq.errors import DecodeError, TaskCancelled, TaskFailed
from taskq.topology.specs import JOURNAL_BYTES, JOURNAL_EVENT_BYTES, JOURNAL_EVENTS

# the events whose arrival can unblock the code (the rest are the code's own record)
RESOLVING = frozenset({"done", "fired", "signal", "cancel"})
COMMANDS = frozenset({"run", "child", "sleep", "wait", "now", "uuid", "random", "patch"})
LOCAL = frozenset({"now", "uuid", "random", "patch"})  # resolved by their own record
# the event that answers each waiting command (a `fired` never answers a step: it is no result)
ANSWERED_BY = {"run": "done", "child": "done", "sleep": "fired"}
# which journal subject holds each kind (taskq.topology.names.Names.journal_subject)
WRITERS = {
    "start": "s",
    "signal": "u",
    "cancel": "u",
    "retry": "o",  # an operator's: producers may signal and cancel, not resume
    "decided": "w",
    "chunk": "c",  # a large round's commands, stored before the round (which names them)
    "done": "w",
    "fired": "w",
}
# events in one run's journal, one event's JSON (a step's result included), and all its
# events' bytes, at most (docs/workflows.md; the stream's own bounds are set beside them)
MAX_EVENTS, MAX_EVENT_BYTES, MAX_JOURNAL_BYTES = (
    JOURNAL_EVENTS,
    JOURNAL_EVENT_BYTES,
    JOURNAL_BYTES,
)
# a message of a run's journal that is no event (undecodable, too large, of a kind its
# subject does not hold: a forgery by a role that may write there): it answers nothing,
# but counts toward the journal's bounds, so junk can fail a run, never hide its events
JUNK = "junk"
MAX_RUN_ID = 64  # a run id (a child's included) at most; longer child ids are digests
DEFAULT_GRACE = 600.0  # seconds a cancelled run's code may compensate, by default


class Definition(Protocol):
    """What a run's decisions need of its workflow's declaration (taskq.workflows.runs)."""

    name: str
    queue: str
    fn: Callable[..., Any]
    validator: ArgsValidator
    timeout: float | None  # seconds a run may take from its start (or retry), at most
    cancel_grace: float  # seconds its code may compensate after a cancel reached it


@dataclass(frozen=True)
class Event:
    """One journal event (or one command inside a `decided` event)."""

    kind: str
    n: int = -1  # a command's number, or the command a `done`/`fired` resolves
    details: dict[str, Any] = field(default_factory=dict)
    seq: int = 0  # where the server stored it (0: not stored yet)
    writer: str = ""  # the journal subject it came from (WRITERS)
    size: int = 0  # its stored bytes (counted toward the journal's byte bound)
    stored_at: float = 0.0  # when the server stored it (epoch seconds; 0: not known)

    @classmethod
    def make(cls, kind: str, n: int = -1, **details: Any) -> Event:
        return cls(kind, n, details)

    @property
    def is_command(self) -> bool:
        return self.kind in COMMANDS

    def describe(self) -> str:
        """How an error names it: `run charge (step 3)`, `sleep (step 4)`."""
        details = self.details
        what = details.get("task") or details.get("workflow") or details.get("name")
        what = what or details.get("id")
        return f"{self.kind} {what} (step {self.n})" if what else f"{self.kind} (step {self.n})"

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"e": self.kind, **self.details}
        if self.kind in ("decided", "chunk"):
            body["commands"] = [c.to_json() for c in self.details.get("commands", [])]
        if self.n >= 0:
            body["n"] = self.n
        return body


def decode(
    data: dict[str, Any], seq: int, writer: str = "", size: int = 0, stored_at: float = 0.0
) -> Event:
    """An event from its stored JSON object (on the `writer` subject: the kind must be
    one that subject holds); DecodeError for anything else."""
    kind, n = data.get("e"), data.get("n", -1)
    if not isinstance(kind, str) or not isinstance(n, int) or isinstance(n, bool):
        raise DecodeError(f"journal event {seq}: no kind or number")
    details = {k: v for k, v in data.items() if k not in ("e", "n")}
    if kind in ("decided", "chunk"):
        commands = details.get("commands", [])
        if not isinstance(commands, list) or not all(isinstance(c, dict) for c in commands):
            raise DecodeError(f"journal event {seq}: commands must be a list of objects")
        details["commands"] = [decode(c, seq) for c in commands]
    if writer and WRITERS.get(kind) != writer:
        raise DecodeError(f"journal event {seq}: a {kind[:20]!r} event is not written there")
    return Event(kind, n, details, seq, writer, size, stored_at)


def command_matches(recorded: Event, made: Event) -> bool:
    """Whether the code's command is the one the journal recorded at its place: the same
    kind and the same target (task, workflow or signal name); arguments may differ."""
    if recorded.kind != made.kind:
        return False
    for key in ("task", "workflow", "name", "id"):
        if recorded.details.get(key) != made.details.get(key):
            return False
    return True


@dataclass(frozen=True)
class Outcome:
    """A command's outcome as the journal tells it: a value, or an error to raise."""

    value: Any = None
    error: BaseException | None = None  # an Exception, or CancelledError (a cancelled run)


def outcome_of(
    run_id: str, command: Event, visible: list[Event], made: list[Event]
) -> Outcome | None:
    """The outcome of `command` among the `visible` events (None: not known yet). A wait's
    signal is the first one of its name not taken by an earlier wait that arrived before
    the wait's timeout fired."""
    if command.kind in LOCAL:
        return Outcome(command.details.get("value"))
    if command.kind == "wait":
        return _wait_outcome(command, visible, made)
    answer = ANSWERED_BY.get(command.kind)
    for event in visible:
        if event.n == command.n and event.kind == answer:
            return outcome_from(run_id, command, event)
    return None


def outcome_from(run_id: str, command: Event, event: Event) -> Outcome:
    """The outcome a `done` or `fired` event gives its command."""
    if event.kind == "fired" or event.details.get("ok", False):
        return Outcome(event.details.get("value"))
    error = event.details.get("error") or {}
    step_id = str(event.details.get("id") or f"{run_id}.{command.n}")
    if error.get("type") == "TaskCancelled":
        return Outcome(error=TaskCancelled(step_id))
    return Outcome(
        error=TaskFailed(
            step_id,
            str(event.details.get("state", "dead")),
            str(error.get("type", "")),
            str(error.get("message", "")),
            str(error.get("traceback", "")),
            str(event.details.get("reason", "")),
        )
    )


def error_details(exc: BaseException) -> dict[str, str]:
    """How the journal records an error that ended a run: its type, message, traceback."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback": trace[-20000:]}


def _wait_outcome(command: Event, visible: list[Event], made: list[Event]) -> Outcome | None:
    name = command.details.get("name")
    waits = [c for c in made if c.kind == "wait" and c.details.get("name") == name]
    signals = [e for e in visible if e.kind == "signal" and e.details.get("name") == name]
    fired = {e.n: e.seq for e in visible if e.kind == "fired"}
    taken: set[int] = set()
    for wait in waits:
        deadline = fired.get(wait.n)
        got = next(
            (s for s in signals if s.seq not in taken and (deadline is None or s.seq < deadline)),
            None,
        )
        if got is not None:
            taken.add(got.seq)
        if wait.n == command.n:
            if got is not None:
                return Outcome(got.details.get("payload"))
            return Outcome(None) if deadline is not None else None
    return None


def retried(run_id: str, events: list[Event]) -> tuple[list[Event], int]:
    """The journal as replay sees it after each `retry` of a failed run, and how many
    retries there were. A retry voids what followed the run's failure: the round that first
    saw a failed step (or, with none, the round that ended the run) and every later round
    are dropped, and so are failed outcomes and outcomes of commands made in the dropped
    rounds; every completed step of the rounds kept stays. After a retry only outcomes of
    the new generation count (`step_id` ends in `r<k>`): a step of a dropped round that ends
    late cannot answer a command made anew."""
    events = assemble(events)
    retries = 0
    for retry in [e for e in events if e.kind == "retry"]:
        before = [e for e in events if e.seq < retry.seq]
        after = [e for e in events if e.seq > retry.seq]
        cut = _cut(before)
        if cut is None:
            continue  # the run had not ended: nothing to void
        retries += 1
        kept_n = sum(
            len(e.details.get("commands", []))
            for e in before
            if e.kind == "decided" and e.seq < cut
        )
        before = [e for e in before if not _voided(e, cut, kept_n)]
        after = [e for e in after if of_generation(run_id, e, retries)]
        events = [*before, retry, *after]
    return events, retries


def _cut(events: list[Event]) -> int | None:
    """The sequence of the first round a retry drops (None: the run has not ended)."""
    ended = [e for e in events if e.kind == "decided" and "end" in e.details]
    if not ended:
        return None
    failed = [e.seq for e in events if e.kind == "done" and not e.details.get("ok", False)]
    if failed:
        seen = [
            e.seq
            for e in events
            if e.kind == "decided" and int(e.details.get("upto", 0)) >= failed[0]
        ]
        if seen:
            return seen[0]
    return ended[-1].seq


def _voided(event: Event, cut: int, kept_n: int) -> bool:
    if event.kind == "decided":
        return event.seq >= cut
    if event.kind == "done":
        return not event.details.get("ok", False) or event.n >= kept_n
    if event.kind == "fired":
        return event.n >= kept_n
    return False


def of_generation(run_id: str, event: Event, retries: int) -> bool:
    """Whether an outcome appended after retry `retries` is of its generation (a child's
    end says its generation, `gen`: a child's id holds its command's nonce)."""
    if event.kind != "done":
        return True
    if "gen" in event.details:
        return bool(event.details["gen"] == retries)
    return str(event.details.get("id", "")) in (
        step_id(run_id, event.n, retries),
        child_id(run_id, event.n, retries),
    )


def step_id(run_id: str, n: int, retries: int = 0) -> str:
    """The task id of step `n` (published after `retries` retries of the run)."""
    return f"{run_id}.{n}" + (f"r{retries}" if retries else "")


def child_id(run_id: str, n: int, retries: int = 0, nonce: str = "") -> str:
    """The run id of child `n` (started after `retries` retries of the run): with its
    command's `nonce` (random, journaled with the command), nobody can start a run under
    it before the parent does; a digest of it where it is longer than MAX_RUN_ID."""
    plain = f"{run_id}-c{n}" + (f"r{retries}" if retries else "") + (f"-{nonce}" if nonce else "")
    if len(plain) <= MAX_RUN_ID:
        return plain
    return "c" + hashlib.sha256(plain.encode()).hexdigest()[:40]


def child_of(run_id: str, command: Event, retries: int = 0) -> str:
    """The run id of the child a `child` command starts."""
    return child_id(run_id, command.n, retries, str(command.details.get("nonce", "")))


def assemble(events: list[Event]) -> list[Event]:
    """Rounds whole: a round too large for one message names the chunks that hold the rest
    of its commands (stored before it); here they are joined, chunk events left out. A
    chunk no round names (its decision lost the race, or died) is nothing."""
    chunks = {e.seq: e.details.get("commands", []) for e in events if e.kind == "chunk"}
    whole = []
    for event in events:
        if event.kind == "chunk":
            continue
        if event.kind == "decided" and event.details.get("chunks"):
            event = joined(event, chunks)
        whole.append(event)
    return whole


def joined(head: Event, chunks: dict[int, list[Event]]) -> Event:
    """A round's event with the commands of the chunks it names, in order."""
    named = [int(seq) for seq in head.details.get("chunks", [])]
    commands = [*head.details.get("commands", []), *(c for s in named for c in chunks.get(s, []))]
    details = {k: v for k, v in head.details.items() if k != "chunks"}
    whole = {**details, "commands": commands}
    return Event(head.kind, head.n, whole, head.seq, head.writer, head.size, head.stored_at)
