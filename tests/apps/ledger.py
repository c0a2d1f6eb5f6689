"""Tasks for subprocess-worker tests; each writes its effects to a ledger file."""

from __future__ import annotations

import os
import time

from taskq import App

app = App()


def note(line: str) -> None:
    path = os.environ["TASKQ_TEST_LEDGER"]
    with open(path, "a") as ledger:
        ledger.write(f"{line} {os.getpid()}\n")
        ledger.flush()


@app.task(ack_wait=1.0, max_retries=3)
def slow(token: str, seconds: float) -> str:
    note(f"start {token}")
    time.sleep(seconds)
    note(f"done {token}")
    return token


@app.task(ack_wait=1.0)
async def quick(token: str) -> str:
    note(f"done {token}")
    return token
