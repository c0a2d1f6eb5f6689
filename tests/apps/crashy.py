"""A task that kills its worker process on every attempt (for `crashed` dead letters)."""

from __future__ import annotations

import os

from taskq import App

app = App()


@app.task(ack_wait=1.0, max_retries=1)
def explode(n: int) -> None:
    os._exit(1)  # like an OOM kill: no exception, no settle
