"""What a Worker is made of once it is connected, kept apart from its core (the fetch loops
and the handling of one delivery, workers/worker.py): the parts that handle a delivery
(`assemble`: admission, control plane, judge with its stages, settler; `start`), and the
loops beside the fetch loops (`beside`: the timers' mover, the priority levels' watcher,
the durability notice, the sweeper, the workflow janitor), each started only when needed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from taskq.app import App
from taskq.client import Client
from taskq.dlq.sweeper import run_sweeper
from taskq.errors import TaskqError
from taskq.workers.admission import Admission
from taskq.workers.control import ControlPlane, durability_notice, notice_task_sets, worker_record
from taskq.workers.executors import Runners
from taskq.workers.judge import Judge
from taskq.workers.lease import Leases
from taskq.workers.levels import Levels
from taskq.workers.running import RunningJobs
from taskq.workers.settle import Settler
from taskq.workers.setup import QueueSetup
from taskq.workers.stages import stages_for
from taskq.workers.timers import run_mover
from taskq.workflows.janitor import run_janitor


@dataclass(frozen=True)
class Parts:
    """What handles deliveries once the worker is connected."""

    admission: Admission
    control: ControlPlane
    judge: Judge
    settler: Settler


@dataclass(frozen=True)
class Shape:
    """What the parts are made with, from the worker."""

    queues: list[str]
    concurrency: int
    stats: Counter[str]
    runners: Runners
    leases: Leases
    problem: Callable[[], str | None]  # why the worker is unhealthy, for its heartbeat


def assemble(app: App, client: Client, shape: Shape) -> Parts:
    """The parts that handle deliveries, each made with what it needs."""
    admission = Admission(client, shape.stats)
    running = RunningJobs()
    pool = shape.runners.pool
    tasks = [f"{t.queue}:{name}" for name, t in app.tasks.items() if t.queue in shape.queues]
    record = worker_record(shape.queues, shape.concurrency, pool.size if pool else None, tasks)
    control = ControlPlane(client, running, shape.stats, record, shape.problem)
    judge = Judge(
        app,
        shape.runners,
        shape.leases,
        running,
        control.cancels,
        control.progress.report,
        admission,
        stages_for(app, client.site),
    )
    settler = Settler(
        client,
        shape.stats,
        admission,
        app.middleware,
        control.progress,
        running=running,
        leases=shape.leases,
        history=control.history.pending,
    )
    return Parts(admission, control, judge, settler)


async def start(client: Client, parts: Parts) -> None:
    """Start the control plane, then say whether live workers of the worker's queues run
    other tasks (a notice: never a reason not to start)."""
    await parts.control.start()
    with contextlib.suppress(TaskqError):
        await notice_task_sets(client, parts.control.record)


def beside(
    app: App,
    client: Client,
    parts: Parts,
    shape: Shape,
    stopping: asyncio.Event,
    levels: tuple[list[QueueSetup], Callable[[QueueSetup], Coroutine[Any, Any, None]]],
    fetch_timeout: float,
    sweeper: bool,
) -> list[asyncio.Task[None]]:
    """Start the loops beside the fetch loops; `levels`: the queues' main consumers and
    how a priority level's fetch loop is run while it has tasks."""
    mains, consume_level = levels
    loops = [asyncio.create_task(Levels(app, client, mains, consume_level).run(stopping))]
    # fired schedules (delayed, periodic, held tasks) into their queues
    loops += [
        asyncio.create_task(
            run_mover(client, q, stopping=stopping, linger=fetch_timeout, stats=shape.stats)
        )
        for q in shape.queues
    ]
    monitor = app.settings.monitor_url
    loops.append(asyncio.create_task(durability_notice(client, monitor, stopping)))
    if sweeper:  # every worker sweeps crash-looped messages on one shared durable consumer
        swept = parts.control.history.pending
        loops.append(asyncio.create_task(run_sweeper(client, stopping, swept, fetch_timeout)))
    if app.workflows:  # journal subjects of ids that never started a run
        loops.append(asyncio.create_task(run_janitor(client, stopping)))
    return loops
