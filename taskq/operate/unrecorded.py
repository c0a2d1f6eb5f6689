"""The state and result of a task that keeps no record when it succeeds (`store_result=False`).

Such a task's failures, dead letters and cancels are recorded like any task's; only its
success writes nothing. So with no record, the task is either still waiting (its message is
in a queue stream, or delayed, or held by a limit) or it succeeded: the worker removes a
message only once it succeeded or its failure is recorded. Telling the two apart reads the
queue streams (`taskq.operate.locate`), which costs a scan of the backlog: the price of not writing
a record per task, paid by whoever asks, not by every task.
"""

from __future__ import annotations

import asyncio
import time

from taskq.client import ClientSource
from taskq.errors import ResultTimeout
from taskq.operate.locate import find_waiting
from taskq.records.heartbeats import running_on
from taskq.records.results import FINAL, ResultRecord, fetch


async def state(source: ClientSource, task_id: str, gone: str = "succeeded") -> str:
    """`queued` while its message waits (or runs), a recorded state, else `gone`."""
    record = await fetch(source, task_id)
    if record is not None:
        return record.state
    if await find_waiting(await source.client(), task_id) is not None:
        return "queued"
    # it may have failed between the two reads: a failure is recorded before its message
    # leaves the queue, so a second read finds it
    record = await fetch(source, task_id)
    return record.state if record is not None else gone


async def shown_state(source: ClientSource, task_id: str, gone: str = "succeeded") -> str:
    """`state`, with `running` for a task a worker's last heartbeat listed as running
    (what `taskq task` says of it: `queued` would be wrong there)."""
    found = await state(source, task_id, gone)
    return await queued_or_running(source, task_id) if found == "queued" else found


async def queued_or_running(source: ClientSource, task_id: str) -> str:
    """A task with no record yet: `running` when a worker's last heartbeat lists it."""
    return "running" if await running_on(source, task_id) else "queued"


async def outcome(source: ClientSource, task_id: str, timeout: float | None) -> ResultRecord:
    """The final record, or a `succeeded` one with no value once the task left its queue
    without a failure; polls (50 ms doubling to 2 s), ResultTimeout past `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.05
    while True:
        now = await state(source, task_id)
        if now == "succeeded":
            return (await fetch(source, task_id)) or ResultRecord(state="succeeded")
        if now in FINAL:
            record = await fetch(source, task_id)
            assert record is not None
            return record
        if deadline is not None and time.monotonic() + pause > deadline:
            raise ResultTimeout(task_id, timeout or 0.0, now)
        await asyncio.sleep(pause)
        pause = min(2.0, pause * 2)
