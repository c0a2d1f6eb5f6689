"""Tasks with flow-control limits, for worker-process tests; each notes what it did (with
the time, its attempt and its process) in the ledger file named by TASKQ_TEST_LEDGER."""

from __future__ import annotations

import os
import time

import taskq
from taskq import App

app = App()


def note(event: str, token: str) -> None:
    line = f"{event} {token} {time.time():.6f} {taskq.current().attempt} {os.getpid()}\n"
    with open(os.environ["TASKQ_TEST_LEDGER"], "a") as ledger:
        ledger.write(line)


@app.task(max_concurrency=3, ack_wait=2.0)
def limited(token: str, seconds: float) -> str:
    note("start", token)
    time.sleep(seconds)
    note("end", token)
    return token


@app.task(concurrency_key="tenant", max_per_key=2, ack_wait=2.0)
def per_tenant(tenant: str, token: str, seconds: float) -> str:
    note("start", f"{tenant}:{token}")
    time.sleep(seconds)
    note("end", f"{tenant}:{token}")
    return token


@app.task(max_concurrency=2, concurrency_key="tenant", max_per_key=1, ack_wait=2.0)
def both(tenant: str, token: str, seconds: float) -> str:
    note("start", f"{tenant}:{token}")
    time.sleep(seconds)
    note("end", f"{tenant}:{token}")
    return token


@app.task(rate_limit="20/s", ack_wait=2.0)
def rated(token: str) -> str:
    note("start", token)
    return token


@app.task(ack_wait=5.0)
def ranked(token: str, seconds: float) -> str:
    time.sleep(seconds)
    note("end", token)
    return token


@app.task(rate_limit="10/s", ack_wait=5.0)
def tenner(token: str) -> str:
    note("start", token)  # the time the body started, by this machine's one clock
    return token
