"""A durable workflow for fault tests: every step writes its runs to a ledger file
(TASKQ_TEST_LEDGER) with its id and attempt, so a test can tell a redelivery after a kill
from a completed step run again. With TASKQ_TEST_DIE_AFTER_JOURNAL set, the worker process
SIGKILLs itself right after a step's outcome is in its run's journal, before the step's ack
(a fault injected around the real write)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import taskq
import taskq.workers.member_writes as writes
from taskq import App, Workflow
from taskq.workflows import store

app = App()
_journaled = writes.step_ended
_recorded = store.record_round


async def _die_after_journal(client: Any, envelope: Any, decision: Any, outcome: Any) -> None:
    await _journaled(client, envelope, decision, outcome)
    os.kill(os.getpid(), signal.SIGKILL)


async def _die_after_round(client: Any, run_id: str, round_: Any, written: int) -> Any:
    recorded = await _recorded(client, run_id, round_, written)
    wanted = os.environ["TASKQ_TEST_DIE_AFTER_ROUND"]
    if recorded is not None and (
        recorded.commands if wanted == "commands" else "end" in round_.details
    ):
        os.kill(os.getpid(), signal.SIGKILL)
    return recorded


if os.environ.get("TASKQ_TEST_DIE_AFTER_JOURNAL"):
    writes.step_ended = _die_after_journal
if os.environ.get("TASKQ_TEST_DIE_AFTER_ROUND"):
    store.record_round = _die_after_round


def note(line: str) -> None:
    with open(os.environ["TASKQ_TEST_LEDGER"], "a") as ledger:
        ledger.write(f"{line}\n")
        ledger.flush()


@app.task(ack_wait=1.0, max_retries=20, backoff=0.05, backoff_max=0.2)
def step(i: int, seconds: float) -> int:
    ctx = taskq.current()
    note(f"start {ctx.id} {ctx.attempt}")
    time.sleep(seconds)
    note(f"done {ctx.id} {ctx.attempt}")
    return i


@app.workflow
async def steps(wf: Workflow, count: int, seconds: float) -> int:
    total = 0
    for i in range(count):
        total += await wf.run(step, i, seconds)
    return total


@app.workflow
async def nap(wf: Workflow, i: int, seconds: float) -> int:
    await wf.sleep(seconds)  # beyond 2 s: a timer held on the server, no worker held
    return i
