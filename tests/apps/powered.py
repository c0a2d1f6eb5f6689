"""Tasks for the power-loss tests (tests/powercut/): a bit of every kind of stored state.

The worker that runs before the power cut consumes only the `default` queue, so what waits
on `later` (a chord's last member) stays there, and the chord's state sits half-done in
the flows bucket when the power goes.
"""

from __future__ import annotations

from taskq import App, Reject

app = App()


@app.task
async def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="later")
async def add_later(a: int, b: int) -> int:
    return a + b


@app.task
async def total(values: list[int]) -> int:
    return sum(values)


@app.task
async def doomed(tid: str) -> None:
    raise Reject(f"{tid} is doomed")  # straight to the DLQ


@app.task(queue="later")
async def later(tid: str) -> str:
    return tid


@app.periodic(cron="0 0 3 * * *")
async def nightly() -> None:
    return None
