"""Replaying a durable workflow's code against its journal (pure: no I/O here).

Workflow code is ordinary async code whose only awaits are `wf.*` calls; each call is a
*command* numbered in the order the code makes it. A decision drives the code in rounds,
the way it first ran: every `decided` event of the journal says which events the code had
seen (`upto`) and which commands it made then. Replaying round by round with the same
events visible makes the same commands, so a completed step's result comes from the
journal, never from running it again; code that now makes other commands than the journal
recorded fails with `NonDeterminism`, naming the step. After the last round the code runs
once more with everything visible: the commands it makes beyond the journal are the
decision's output. A `Replayer` can be kept between decisions (the worker that ran a run
last feeds it only the new events), so a resumption does not replay the whole history.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any

from taskq.clock import Clock
from taskq.errors import TaskqError
from taskq.workflows.journal import (
    ANSWERED_BY,
    DEFAULT_GRACE,
    JUNK,
    RESOLVING,
    Event,
    Outcome,
    command_matches,
    joined,
    outcome_from,
    outcome_of,
)

_PENDING = object()


class NonDeterminism(TaskqError):
    """The workflow's code no longer makes the commands its journal recorded (changed code
    without `wf.patched`, or a choice that depends on something outside the journal)."""

    def __init__(self, run_id: str, n: int, recorded: str, made: str) -> None:
        self.run_id = run_id
        self.n = n
        self.recorded = recorded
        self.made = made
        super().__init__(
            f"workflow run {run_id} is not deterministic at step {n}: its journal recorded "
            f"{recorded}, the code now makes {made}"
        )


class WorkflowCodeError(TaskqError):
    """Workflow code awaited something other than a `wf.*` call (its awaits must be
    journaled: run I/O and anything else in a step)."""


@dataclass
class Command:
    """One `wf.*` call that waits: its outcome comes from the journal (now or later)."""

    replayer: Replayer
    event: Event

    def __await__(self) -> Generator[Any, None, Any]:
        while True:
            found = self.replayer.outcome(self.event)
            if found is not None:
                if found.error is not None:
                    raise found.error
                return found.value
            if self.replayer.deliver_cancel():
                raise asyncio.CancelledError(f"workflow run {self.replayer.run_id} was cancelled")
            yield self  # blocked: the round ends here


@dataclass
class Blocked:
    """What `wf.gather` yields while members are blocked."""

    members: list[Any]


class Gather:
    """Members driven in turn, in their order; their results in order (the first member
    that raises raises here)."""

    def __init__(self, members: tuple[Awaitable[Any], ...]) -> None:
        self._members = [m.__await__() for m in members]

    def __await__(self) -> Generator[Any, None, list[Any]]:
        results: list[Any] = [_PENDING] * len(self._members)
        waiting: dict[int, Any] = {}  # member -> what it is blocked on
        pending = list(range(len(self._members)))
        while True:
            for i in pending:
                if _still_blocked(waiting.get(i)):
                    continue  # its command has no outcome yet: no need to drive it
                try:
                    waiting[i] = self._members[i].send(None)
                except StopIteration as done:
                    results[i] = done.value
                    waiting.pop(i, None)
            pending = [i for i in pending if results[i] is _PENDING]
            if not pending:
                return results
            yield Blocked([waiting[i] for i in pending])


@dataclass
class Replayer:
    """One run's code driven against its journal, round by round."""

    run_id: str
    code: Coroutine[Any, Any, Any] | None = None  # set once the `wf` it takes exists
    visible: list[Event] = field(default_factory=list)  # resolving events seen so far
    made: list[Event] = field(default_factory=list)  # the code's commands, in order
    recorded: list[Event] = field(default_factory=list)  # the journal's commands, in order
    ended: Outcome | None = None  # the code returned (value) or raised (error)
    seen: int = 0  # the last journal sequence fed in
    broken: NonDeterminism | None = None  # kept apart: workflow code may catch Exception
    finished: bool = False  # a recorded round ended the run: nothing is left to decide
    end: dict[str, Any] | None = None  # ...and how (the round's `end`)
    retries: int = 0  # how often the run was retried (its steps' ids end in `r<retries>`)
    written: int = 0  # the last workers' event seen (a round is appended after it, or not)
    own: set[int] = field(default_factory=set)  # rounds this replayer recorded itself
    _known: set[int] = field(default_factory=set)  # the visible events' sequences
    _outcomes: dict[tuple[int, str], Event] = field(default_factory=dict)  # (n, done|fired)
    _chunks: dict[int, list[Event]] = field(default_factory=dict)  # a large round's parts
    settled: int = 0  # commands before this one all have their outcome (end.mark_waiting)
    started_at: str = ""  # when the run started, and its parent run (for its summary)
    parent: str | None = None
    parent_step: dict[str, Any] | None = None  # the start's pointer to the parent's command
    secret: str | None = None  # the run's secret, from its start (None: an earlier taskq's)
    timeout: float | None = None  # the workflow's timeout in seconds (None: none)...
    deadline: float | None = None  # ...as the epoch second (its clock's) the run times out
    deadline_set: bool = False  # its wake-up at the deadline is published
    warned: bool = False  # its journal's size was warned about (80% of the limit)
    junk: int = 0  # journal messages that are no event (they count toward its bounds)
    size: int = 0  # the bytes of every journal message fed (MAX_JOURNAL_BYTES bounds it)
    cancel_seen: bool = False  # a cancel is visible: the run is cancelling
    clock: Clock = field(default_factory=Clock)  # its Client's: what now is (taskq.clock)
    cancelled_at: float = 0.0  # when the server stored the first one (0: not known)
    cancel_at: int = -1  # commands made when the code got CancelledError (-1: not yet)
    cancel_grace: float = DEFAULT_GRACE  # seconds its code may compensate after a cancel
    cancels_sent: bool = False  # what ran when the cancel came was cancelled (carried out)

    # -- what the code's `wf` calls ----------------------------------------------------------
    def issue(self, kind: str, **details: Any) -> Event:
        """The code makes a command now: the journal's one at this place (checked), or a
        new one, numbered next."""
        n = len(self.made)
        made = Event.make(kind, n, **details)
        if n < len(self.recorded):
            recorded = self.recorded[n]
            if not command_matches(recorded, made):
                self.broken = NonDeterminism(self.run_id, n, recorded.describe(), made.describe())
                raise self.broken
            made = recorded  # its journaled details (a `now`'s value, a timer's end) hold
        self.made.append(made)
        return made

    def upcoming(self) -> Event | None:
        """The journal's command at the next place, when replaying (None: beyond it)."""
        n = len(self.made)
        return self.recorded[n] if n < len(self.recorded) else None

    def outcome(self, command: Event) -> Outcome | None:
        """The command's outcome among the visible events (a lookup, but for waits)."""
        answer = ANSWERED_BY.get(command.kind)
        if answer is not None:
            found = self._outcomes.get((command.n, answer))
            return None if found is None else outcome_from(self.run_id, command, found)
        return outcome_of(self.run_id, command, self.visible, self.made)

    def deliver_cancel(self) -> bool:
        """Whether the code, blocked on a command, gets CancelledError now: once, when a
        cancel is visible (where the journal says, so replay delivers it at the same place).
        The commands made in this round before it are abandoned: never carried out."""
        if not self.cancel_seen or self.cancel_at >= 0:
            return False
        self.cancel_at = len(self.made)
        for i in range(len(self.recorded), len(self.made)):
            self.made[i] = abandoned(self.made[i])
        return True

    # -- what a decision calls ---------------------------------------------------------------
    def feed(self, events: list[Event]) -> None:
        """Replay `events` (the whole journal, or what came after `seen`): each `decided`
        event is a round, checked against the commands it recorded."""
        self._chunks.update(
            (e.seq, e.details.get("commands", [])) for e in events if e.kind == "chunk"
        )
        self.junk += sum(1 for e in events if e.kind == JUNK)
        self.size += sum(e.size for e in events)
        for event in events:
            if event.kind == "decided" and event.seq in self.own:
                continue  # recorded by this replayer: its commands are made already
            if event.kind == "decided":
                event = joined(event, self._chunks) if event.details.get("chunks") else event
                if "end" in event.details and not self.finished:
                    self.finished, self.end = True, dict(event.details["end"])
                upto = int(event.details.get("upto", 0))
                self._show([e for e in events if self.seen < e.seq <= upto])
                self.seen = max(self.seen, upto)
                commands: list[Event] = event.details.get("commands", [])
                self.recorded.extend(commands)
                self._drive()
                self._check_round()
        self._show([e for e in events if e.seq > self.seen])
        self.seen = max([self.seen, *(e.seq for e in events)])
        self.written = max([self.written, *(e.seq for e in events if e.writer == "w")])

    def decide(self) -> list[Event]:
        """Drive the code with every event fed so far visible; the commands it made beyond
        the journal (the decision records them, then carries them out)."""
        self._drive()
        return self.made[len(self.recorded) :]

    def _show(self, events: list[Event]) -> None:
        for event in events:
            if event.kind in RESOLVING and event.seq not in self._known:
                self._known.add(event.seq)
                self.visible.append(event)
                if event.kind in ("done", "fired"):
                    self._outcomes.setdefault((event.n, event.kind), event)
                elif event.kind == "cancel" and not self.cancel_seen:
                    self.cancel_seen, self.cancelled_at = True, event.stored_at

    def _drive(self) -> None:
        if self.ended is not None or self.code is None:
            return
        try:
            yielded = self.code.send(None)
        except StopIteration as done:
            self.ended = Outcome(done.value)
        except (Exception, asyncio.CancelledError) as exc:  # failed, or cancelled
            self.ended = Outcome(error=exc)
        else:
            if not isinstance(yielded, Command | Blocked):
                self._end(WorkflowCodeError(_foreign(yielded)))
        if self.broken is not None:  # whatever the code made of it
            self._end(self.broken)

    def _check_round(self) -> None:
        """A replayed round must make every command it recorded (fewer: the code changed)."""
        if len(self.made) < len(self.recorded) and self.broken is None:
            missing = self.recorded[len(self.made)]
            made = "its end" if self.ended is not None else "no command"
            self.broken = NonDeterminism(self.run_id, missing.n, missing.describe(), made)
            self._end(self.broken)
        elif len(self.made) > len(self.recorded) and self.broken is None:
            extra = self.made[len(self.recorded)]
            self.broken = NonDeterminism(self.run_id, extra.n, "no command", extra.describe())
            self._end(self.broken)

    def _end(self, error: Exception) -> None:
        if self.code is not None:
            self.code.close()
        self.ended = Outcome(error=error)

    def close(self) -> None:
        if self.code is not None:
            self.code.close()


def _still_blocked(blocked_on: Any) -> bool:
    """Whether a gather member blocked on `blocked_on` (a command, or anything else: driven
    again to see) is certainly still blocked (not when a cancel waits to be delivered)."""
    if not isinstance(blocked_on, Command):
        return False
    replayer = blocked_on.replayer
    cancel_due = replayer.cancel_seen and replayer.cancel_at < 0
    return not cancel_due and replayer.outcome(blocked_on.event) is None


def abandoned(command: Event) -> Event:
    """`command` made in the round a cancel reached the code, before it: recorded (replay
    makes it again) but never carried out, and awaited by no one."""
    return dataclasses.replace(command, details={**command.details, "abandoned": True})


def carried_out(command: Event) -> bool:
    """Whether `command` was published (an abandoned one never is)."""
    return not command.details.get("abandoned", False)


def _foreign(yielded: Any) -> str:
    return (
        f"workflow code awaited {type(yielded).__name__}, not a wf.* call: run I/O, sleeps "
        "and anything else that is not deterministic in a step (wf.run)"
    )
