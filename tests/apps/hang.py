"""A `def` task that never returns and ignores cancellation (as code stuck in C would)."""

from __future__ import annotations

import time

from taskq import App

app = App()


@app.task(timeout=0.3, max_retries=0)
def hang() -> None:
    time.sleep(10**6)
