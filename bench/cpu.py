"""The app of the CPU-bound benchmark (`bench/processes.py`): one pure-Python task of
about 20 ms, once as a plain `def` (threads) and once on the process pool."""

from __future__ import annotations

import time

from taskq import App

app = App()


def spin(seconds: float) -> int:
    """Pure-Python work that holds the GIL for `seconds`."""
    deadline = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < deadline:
        n += 1
    return n


@app.task(queue="threads")
def in_thread(seconds: float) -> None:
    spin(seconds)


@app.task(queue="procs", executor="process")
def in_process(seconds: float) -> None:
    spin(seconds)
