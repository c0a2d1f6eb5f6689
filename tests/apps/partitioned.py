"""An app with a partitioned queue (for CLI tests of `--partition-key`)."""

from __future__ import annotations

from taskq import App

app = App()


@app.task(queue="split", partitions=3)
async def tag(n: int) -> int:
    return n
