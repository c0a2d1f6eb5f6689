"""Durable workflows as the application declares and drives them: `@app.workflow` makes a
`WorkflowDef` (its decisions run as a task of the same name on its queue); `.start()` makes
a `WorkflowRun`, whose `signal`, `result`, `status` and `cancel` act on the run's journal."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from taskq.arguments import ArgsValidator
from taskq.errors import ConfigError
from taskq.handle import HandleSource
from taskq.ids import new_id
from taskq.records.results import run_key, wait
from taskq.settings import Settings
from taskq.workflows import store
from taskq.workflows.decide import Attempt, decide
from taskq.workflows.end import expire_run
from taskq.workflows.journal import DEFAULT_GRACE
from taskq.workflows.sends import cancel_run, retry_run, send_signal
from taskq.workflows.state import RunStepState
from taskq.workflows.wake import start_run
from taskq.workflows.workflow import journalable


class AppLike(HandleSource, Protocol):
    """What workflows need of their App (taskq.app.App): a Client, the portal for sync
    calls, task registration, and its workflows by name."""

    workflows: dict[str, WorkflowDef]
    settings: Settings

    def task(self, fn: Any = None, **options: Any) -> Any: ...


WorkflowFn = Callable[..., Coroutine[Any, Any, Any]]
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
DECISION_RETRIES = 50  # a decision that keeps failing on the server's side is retried long


class WorkflowDef:
    """A declared durable workflow: its name, queue and code."""

    def __init__(
        self,
        app: AppLike,
        fn: WorkflowFn,
        name: str,
        queue: str,
        timeout: float | None = None,
        cancel_grace: float = DEFAULT_GRACE,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.queue = queue
        self.timeout = timeout  # seconds a run may take from its start (or retry)
        self.cancel_grace = cancel_grace  # seconds its code may compensate after a cancel
        self.validator = ArgsValidator(fn, name, skip_first=1)  # `wf` comes first
        definition = self

        async def decision(run: str, fired: int = -1, expire: bool = False) -> None:
            from taskq.context import current

            client = await app.client()
            if expire:  # the run ended `results_ttl` ago (checked: anyone may ask)
                await expire_run(client, run)
                return
            ctx = current()
            await decide(client, definition, run, fired, Attempt(ctx.id, ctx.attempt))

        decision.__name__ = name
        self.decider = app.task(
            name=name,
            queue=queue,
            store_result=False,
            max_retries=DECISION_RETRIES,
            # a decision takes milliseconds (its lease is extended while it runs): one whose
            # worker died is handed to another within seconds
            ack_wait=app.settings.timings.decision_ack_wait,
            backoff=0.5,
            backoff_max=30.0,
        )(decision)

    def options(self, *, key: str | None = None) -> WorkflowCall:
        """`key`: the run's id, so starting it again is the same run (idempotent)."""
        return WorkflowCall(self, key)

    async def start(self, *args: Any, **kwargs: Any) -> WorkflowRun:
        return await WorkflowCall(self, None).start(*args, **kwargs)

    def start_sync(self, *args: Any, **kwargs: Any) -> WorkflowRun:
        return self.app.portal.run(self.start(*args, **kwargs))


@dataclass(frozen=True)
class WorkflowCall:
    definition: WorkflowDef
    key: str | None

    async def start(self, *args: Any, **kwargs: Any) -> WorkflowRun:
        """Start a run (or find the one already started under this key)."""
        definition = self.definition
        wire_args, wire_kwargs = journalable(
            definition.name, *definition.validator.for_wire(args, kwargs)
        )
        run_id = _run_id(self.key)
        client = await definition.app.client()
        call = {
            "workflow": definition.name,
            "queue": definition.queue,
            "args": wire_args,
            "kwargs": wire_kwargs,
        }
        created = await start_run(client, run_id, call)
        return WorkflowRun(run_id, definition.app, definition.name, definition.queue, created)

    def start_sync(self, *args: Any, **kwargs: Any) -> WorkflowRun:
        return self.definition.app.portal.run(self.start(*args, **kwargs))


@dataclass(frozen=True)
class WorkflowRun:
    """A durable workflow run: its id, and what can be done to it from outside."""

    id: str
    app: AppLike
    workflow: str
    queue: str
    # False when `start()` found the run already started under its key (the same run)
    created: bool = True

    async def signal(self, name: str, payload: Any = None) -> None:
        """Send the run a signal: the payload of its next `wf.wait_for(name)` (kept until
        the run waits for it)."""
        await send_signal(await self.app.client(), self.id, name, payload, self._target())

    async def cancel(self) -> None:
        """Cancel the run: its running steps and children are cancelled, it ends
        `cancelled`."""
        await cancel_run(await self.app.client(), self.id, self._target())

    def _target(self) -> tuple[str, str] | None:
        return (self.workflow, self.queue) if self.workflow else None

    async def retry(self) -> None:
        """Resume a failed run from its failed step, keeping every completed step."""
        await retry_run(await self.app.client(), self.id)

    async def result(self, timeout: float | None = None) -> Any:
        """The workflow's return value once it succeeded; raises TaskFailed if it failed,
        TaskCancelled if it was cancelled, ResultTimeout if nothing final comes in time."""
        # the run's own record (end.py), where no task's record can be
        record = await wait(self.app, self.id, timeout, run_key(self.id))
        record.raise_if_failed(self.id)
        return record.result

    def result_sync(self, timeout: float | None = None) -> Any:
        return self.app.portal.run(self.result(timeout))

    async def status(self) -> str:
        """running | sleeping | waiting | cancelling | succeeded | dead | cancelled
        (`unknown`: no such run; taskq.states)."""
        summary = await store.load_summary(await self.app.client(), self.id)
        if summary is not None:
            return summary.state
        # started here but not decided on yet (its first decision writes the summary)
        return "running" if self.workflow else "unknown"


def register_workflow(app: AppLike, fn: WorkflowFn, queue: str, **options: Any) -> WorkflowDef:
    """`@app.workflow`: its options are `name`, `timeout` and `cancel_grace` (ConfigError
    for any other)."""
    unknown = sorted(set(options) - {"name", "timeout", "cancel_grace"})
    if unknown:
        raise ConfigError(
            f"@app.workflow takes name, queue, timeout and cancel_grace, not {', '.join(unknown)}"
        )
    name = options.get("name") or fn.__name__
    grace = _seconds(options.get("cancel_grace", DEFAULT_GRACE), "cancel_grace")
    definition = WorkflowDef(
        app, fn, name, queue, _seconds(options.get("timeout")), grace or DEFAULT_GRACE
    )
    app.workflows[definition.name] = definition
    return definition


def _seconds(timeout: Any, what: str = "timeout") -> float | None:
    """A workflow's `timeout` (or `cancel_grace`): seconds (int or float) or a timedelta,
    above zero and finite; or None."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigError(f"a workflow's {what} is seconds or a timedelta above 0: {timeout!r}")
    if not math.isfinite(timeout):
        raise ConfigError(f"a workflow's {what} is a finite number of seconds: {timeout!r}")
    return float(timeout)


def _here(definition: WorkflowDef, run_id: str) -> RunStepState:
    return RunStepState(id=run_id, n=0, workflow=definition.name, queue=definition.queue)


def _run_id(key: str | None) -> str:
    if key is None:
        return new_id()
    if not isinstance(key, str) or not _RUN_ID.fullmatch(key):
        raise ConfigError(
            f"a workflow key is 1 to 40 letters, digits, '_' or '-', not {str(key)[:80]!r}"
        )
    return key
