"""Tasks enqueued through the outbox in tests (each writes a ledger line when it runs), and
a fault for the relay: with TASKQ_TEST_DIE_AFTER_PUBLISH=N the relay process SIGKILLs
itself right after its Nth pass published its rows, before it deletes them (a fault
injected around the real publish and the real transaction)."""

from __future__ import annotations

import os
import signal
from typing import Any

import taskq.outbox.relay as relaying
from taskq import App

app = App()
_published = {"passes": 0}
_relay = relaying.relay


async def _die_after_publish(*args: Any) -> Any:
    relayed = await _relay(*args)
    _published["passes"] += 1
    if _published["passes"] >= int(os.environ["TASKQ_TEST_DIE_AFTER_PUBLISH"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return relayed


if os.environ.get("TASKQ_TEST_DIE_AFTER_PUBLISH"):
    relaying.relay = _die_after_publish


def note(line: str) -> None:
    path = os.environ.get("TASKQ_TEST_LEDGER")
    if path:
        with open(path, "a") as ledger:
            ledger.write(f"{line}\n")


@app.task(ack_wait=5.0)
async def receipt(order: int) -> int:
    note(f"receipt {order}")
    return order


@app.task(queue="emails", priority=3)
async def email(to: str) -> str:
    note(f"email {to}")
    return to
