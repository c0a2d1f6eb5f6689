"""The app the benchmark's worker processes run: a no-op task."""

from __future__ import annotations

from taskq import App

app = App()


@app.task
async def noop(n: int = 0) -> None:
    return None


@app.task(queue="lean", store_result=False)
async def lean(n: int = 0) -> None:
    """The same no-op keeping no result record (the `store_result=False` drain)."""
    return None
