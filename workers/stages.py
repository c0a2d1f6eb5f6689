"""Features' checks of a delivery before it runs, each a `Stage` the worker wires into its
judge (`stages_for`): a debounced burst's wake-up, a call a throttle dropped, a durable
workflow step's checks against its run's journal, a task an edge site ran already, a task
due later. The judge knows none of them: it decodes, finds the task, and asks a `Phase`'s
stages only when the delivery carries one of the headers or envelope fields that mark
them (a set look-up and a field read, in the judge: no code here runs for a plain task);
a stage the worker does not need is not wired at all (a task sourced from a hub is looked
up only at a site).

A stage's `check` returns the delivery's verdict when it must not run now (held, dropped,
dead, acknowledged unrun), or None to go on; it may also replace `job.envelope` (a burst's
wake-up runs the burst's last call).
"""

from __future__ import annotations

import asyncio
import dataclasses

from taskq.app import App
from taskq.flowcontrol.debounce import BURST, judge_wake_up
from taskq.flowcontrol.gates import DROPPED, KEPT
from taskq.flowcontrol.held import FIRED
from taskq.policy import Cancel, Dead, Decision, Hold, Outcome
from taskq.records.clock import parse_time
from taskq.records.results import fetch
from taskq.workers.job import Job
from taskq.workflows.state import RunStepState
from taskq.workflows.steps import ended_already, is_bound

Early = tuple[Decision, Outcome | None]
# a message a stream copied from another (an edge site's queue, sourcing the hub's outbox)
SOURCED = "Nats-Stream-Source"
ENDED = frozenset({"succeeded", "dead", "cancelled", "dropped"})  # record states: no rerun


class Stage:
    """One feature's check of a delivery before it runs, marked by a header or an envelope
    field (the other None) that a delivery it concerns carries."""

    header: str | None = None
    field: str | None = None

    def applies(self, job: Job) -> bool:
        """Whether this delivery concerns the feature: its mark, unless a stage narrows it."""
        if self.header is not None:
            return job.delivery.header(self.header) is not None
        return self.field is not None and bool(getattr(job.envelope, self.field, None))

    async def check(self, job: Job) -> Early | None:
        """The delivery's verdict when it must not run now, else None."""
        raise NotImplementedError


class Phase:
    """The stages asked at one point of judging, in order, and what marks a delivery that
    concerns any of them: a header name, or an envelope field that is set."""

    def __init__(self, stages: list[Stage]) -> None:
        self.stages = stages
        self.headers = frozenset(s.header for s in stages if s.header is not None)
        self.fields = tuple(s.field for s in stages if s.field is not None)


class Stages:
    """The phases a worker wired: `on_arrival` right after the envelope is decoded (before
    its task is looked up), `before_run` once the engine's own checks (cancelled, unknown,
    attempts, expiry) passed."""

    def __init__(self, on_arrival: list[Stage], before_run: list[Stage]) -> None:
        self.on_arrival = Phase(on_arrival)
        self.before_run = Phase(before_run)


async def first_verdict(stages: list[Stage], job: Job) -> Early | None:
    """The verdict of the first stage that stops the delivery, if one does."""
    for stage in stages:
        if stage.applies(job):
            early = await stage.check(job)
            if early is not None:
                return early
    return None


def stages_for(app: App, site: str | None) -> Stages:
    """The stages of a worker of `app` on a server whose JetStream domain is `site`."""
    before_run: list[Stage] = [StepInJournal(app)]
    if site is not None:
        before_run.append(RanAtThisSite(app))
    before_run.append(DueLater(app))
    return Stages([BurstWakeUp(app), ThrottleDropped()], before_run)


class BurstWakeUp(Stage):
    """A debounced burst's wake-up (its `BURST` header): held until its burst is due,
    dropped if its burst ran, or run as the burst's last call (taskq.flowcontrol.debounce)."""

    header = BURST

    def __init__(self, app: App) -> None:
        self._app = app

    async def check(self, job: Job) -> Early | None:
        assert job.envelope is not None
        client = await self._app.client()
        has_record = await fetch(client, job.envelope.id) is not None
        key_token = job.delivery.header(BURST) or ""
        verdict = await judge_wake_up(client, job.envelope, key_token, has_record)
        if verdict.done:
            return Hold("its debounced burst ran already", done=True), None
        if verdict.run is None:
            return Hold("debounce", until=verdict.until), None
        job.envelope = verdict.run
        return None


class ThrottleDropped(Stage):
    """A call a throttle window dropped (its `DROPPED` header): recorded as dropped."""

    header = DROPPED

    async def check(self, job: Job) -> Early | None:
        reason, kept = job.delivery.header(DROPPED) or "", job.delivery.header(KEPT) or ""
        shown = reason[:300] + (f" (kept {kept[:128]})" if kept else "")
        return Cancel("dropped", shown, kept[:128]), None


class StepInJournal(Stage):
    """A durable workflow step its run's journal never commanded (a producer may publish
    to the queue): dead unrun, and recorded as no step's outcome. A step whose outcome its
    run's journal holds already (redelivered after its worker died before the ack):
    acknowledged unrun, so a completed step never runs again."""

    field = "workflow"

    def __init__(self, app: App) -> None:
        self._app = app

    def applies(self, job: Job) -> bool:  # narrower than its mark: only a durable step
        return job.envelope is not None and isinstance(job.envelope.workflow, RunStepState)

    async def check(self, job: Job) -> Early | None:
        envelope = job.envelope
        assert envelope is not None and isinstance(envelope.workflow, RunStepState)
        client = await self._app.client()
        if not await is_bound(client, envelope):
            job.envelope = dataclasses.replace(envelope, workflow=None)
            why = f"no decision of workflow run {envelope.workflow.id} commanded this step"
            return Dead("forged_step", why), None
        if await ended_already(client, envelope):  # a first delivery too (a restarted server)
            return Hold("its outcome is in its run's journal already", done=True), None
        return None


class RanAtThisSite(Stage):
    """A task the hub sent that this site ran to its end already: acknowledged unrun. The
    hub sends it again when this site's server died after storing it and before its flow
    control told the hub (a sourced position is kept only on a clean stop; docs/edge.md)."""

    header = SOURCED

    def __init__(self, app: App) -> None:
        self._app = app

    async def check(self, job: Job) -> Early | None:
        assert job.envelope is not None
        record = await fetch(await self._app.client(), job.envelope.id)
        if record is not None and record.state in ENDED:
            return Hold(f"it ran at this site already ({record.state})", done=True), None
        return None


class DueLater(Stage):
    """A delayed task due later (its `eta`): held (stored as a schedule) until then; due
    within `timings.in_worker_wait` seconds, it waits here instead (never early, no
    schedule's round trip). One its schedule fired is due now: clocks may differ."""

    field = "eta"

    def __init__(self, app: App) -> None:
        self._app = app
        self._clock = app.clock

    async def check(self, job: Job) -> Early | None:
        assert job.envelope is not None and job.envelope.eta
        if job.delivery.header(FIRED) is not None:
            return None
        due = parse_time(job.envelope.eta).timestamp()
        if due <= self._clock.time():
            return None
        if due - self._clock.time() > self._app.settings.timings.in_worker_wait:
            return Hold(f"its eta {job.envelope.eta}", until=due), None
        await asyncio.sleep(max(0.0, due - self._clock.time()))
        return None
