"""One delivery while the worker handles it: what the judge, the admission and the settler
learn about it along the way."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from taskq.context import TaskContext
from taskq.flowcontrol.start_gate import StartGate
from taskq.nats import Delivery
from taskq.records.envelope import Envelope
from taskq.task import Task
from taskq.workers.setup import QueueSetup


@dataclass
class Job:
    """What the worker knows about one delivery while handling it."""

    setup: QueueSetup
    delivery: Delivery
    queue: str  # the setup's: plain fields, read on every delivery's path
    # the attempt number: the server's delivery count plus attempts spent before this
    # message existed (a task held by a limit is re-published and keeps its count)
    attempt: int
    envelope: Envelope | None = None
    task: Task[Any, Any] | None = None
    started: float = 0.0
    ran: float = -1.0  # seconds its attempt ran (-1: none ran): the history's run times
    context: TaskContext | None = None
    running: asyncio.Task[Any] | None = None  # set while the attempt runs: what a cancel stops
    handler: asyncio.Task[Any] | None = None  # the worker's task handling this delivery
    cancel_requested: bool = False
    slot_tried: bool = False  # it asked its key for a slot (taskq.workers.admission)
    gate: StartGate | None = None  # a rate-limited task's reserved start, checked last
