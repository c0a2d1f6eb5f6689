"""The sleeping workflow of `bench/workflows.py`, importable by a `taskq worker` process of
its own (so the bench reads that process's memory, not its own)."""

from __future__ import annotations

import time
from datetime import timedelta

from taskq import App, Workflow

app = App()  # configured by the bench (its process) and by `taskq --url --prefix worker`


@app.workflow
async def nap(wf: Workflow, seconds: float) -> float:
    due = wf.now().timestamp() + seconds  # the timer's due time, as journaled
    await wf.sleep(timedelta(seconds=seconds))
    return time.time() - due  # how late this run woke (its decision ran)
