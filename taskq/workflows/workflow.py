"""`Workflow`: what durable workflow code gets as `wf`, the only things it may await.

Every call is a command journaled in the run (`taskq.workflows.replay`): a step's task run
(`run`, `map`), a durable timer (`sleep`), a signal awaited (`wait_for`), a child run
(`child`), and values that must not change on replay (`now`, `uuid`, `random`, `patched`).
"""

from __future__ import annotations

import random as _random
import secrets
import uuid as _uuid
from collections.abc import Awaitable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from taskq.errors import ArgumentsError, ConfigError, NonFiniteFloat
from taskq.records.clock import format_epoch, parse_time
from taskq.records.finite import finite_json
from taskq.workflows.replay import Command, Gather, Replayer

if TYPE_CHECKING:
    from taskq.task import Task

MAX_WAIT = timedelta(days=365)  # a timer this far ahead at most (a schedule's reach)


class Workflow:
    """The `wf` of one run: its id, and the calls its code journals."""

    def __init__(self, run_id: str, replayer: Replayer) -> None:
        self.run_id = run_id
        self._replayer = replayer

    def run(self, task: Task[Any, Any], *args: Any, **kwargs: Any) -> Command:
        """Run `task` as a step and await its result; a step that dead-letters raises
        TaskFailed here (catch it to compensate). Its task id is `<run id>.<n>`, the same
        on every attempt: `taskq.current().id` is its idempotency key."""
        wire_args, wire_kwargs = journalable(task.name, *task.validator.for_wire(args, kwargs))
        event = self._replayer.issue(
            "run", task=task.name, queue=task.queue, args=wire_args, kwargs=wire_kwargs
        )
        return Command(self._replayer, event)

    def map(self, task: Task[Any, Any], items: Iterable[Any]) -> Gather:
        """One step per item (a Spark batch task's items run as batch jobs), their results
        in the items' order."""
        return Gather(tuple(self.run(task, item) for item in items))

    def gather(self, *members: Awaitable[Any]) -> Gather:
        """Await steps, timers, signals, children or coroutines of them together; their
        results in order (fan-out, then fan-in once)."""
        return Gather(members)

    def child(self, workflow: Any, *args: Any, **kwargs: Any) -> Command:
        """Start `workflow` (an `@app.workflow`) as a child run and await its result; it
        is cancelled with this run. Its id is `<run id>-c<n>-<nonce>`: the nonce is random
        (journaled with the command), so no one can start a run under it first."""
        wire_args, wire_kwargs = journalable(
            workflow.name, *workflow.validator.for_wire(args, kwargs)
        )
        event = self._replayer.issue(
            "child",
            workflow=workflow.name,
            queue=workflow.queue,
            args=wire_args,
            kwargs=wire_kwargs,
            nonce=secrets.token_hex(8),
        )
        return Command(self._replayer, event)

    def sleep(self, delay: timedelta | float) -> Command:
        """A durable timer: the run holds no worker while it sleeps, and wakes on any worker,
        after restarts too."""
        seconds = _seconds(delay, "sleep")
        until = format_epoch(self._replayer.clock.time() + seconds)
        return Command(self._replayer, self._replayer.issue("sleep", until=until))

    def wait_for(self, name: str, timeout: timedelta | float | None = None) -> Command:
        """The payload of the next signal `name` sent to the run (one sent before this wait
        is kept for it), or None when `timeout` passes first."""
        if not isinstance(name, str) or not name or len(name) > 128:
            raise ConfigError(f"a signal name is 1 to 128 characters, not {str(name)[:80]!r}")
        now = self._replayer.clock.time()
        until = None if timeout is None else format_epoch(now + _seconds(timeout, "wait"))
        return Command(self._replayer, self._replayer.issue("wait", name=name, until=until))

    def now(self) -> datetime:
        """The current time, as journaled the first time this call ran."""
        return parse_time(self._local("now", lambda: format_epoch(self._replayer.clock.time())))

    def uuid(self) -> str:
        """A random UUID, the same on every replay."""
        return str(self._local("uuid", lambda: str(_uuid.uuid4())))

    def random(self) -> float:
        """A random float in [0, 1), the same on every replay."""
        return float(self._local("random", _random.random))

    def patched(self, patch_id: str) -> bool:
        """True where new code runs (and from now on in this run); False while replaying a
        run that passed this place before the patch existed, so old runs keep their path."""
        upcoming = self._replayer.upcoming()
        old_path = upcoming is not None and (
            upcoming.kind != "patch" or upcoming.details.get("id") != patch_id
        )
        if old_path:
            return False
        self._replayer.issue("patch", id=patch_id, value=True)
        return True

    def _local(self, kind: str, make: Any) -> Any:
        upcoming = self._replayer.upcoming()
        value = make() if upcoming is None else None
        event = self._replayer.issue(kind, value=value)
        return event.details.get("value")


def journalable(
    name: str, args: list[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """A call's wire arguments, or ArgumentsError at the call for a nan or infinity in
    them (JSON has no form for one: the journal would hold something else)."""
    try:
        finite_json([args, kwargs], what="arguments")
    except NonFiniteFloat as exc:
        raise ArgumentsError(name, str(exc)) from None
    return args, kwargs


def _seconds(delay: timedelta | float, what: str) -> float:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not 0 <= seconds <= MAX_WAIT.total_seconds():
        raise ConfigError(f"a {what} lasts 0 s to 365 days, not {seconds!r} s")
    return seconds
