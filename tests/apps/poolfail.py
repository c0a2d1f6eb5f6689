"""A process task whose start hook fails in the pool processes only."""

from __future__ import annotations

import multiprocessing

from taskq import App

app = App()


@app.on_worker_start
def open_database() -> None:
    if multiprocessing.parent_process() is not None:  # in a pool process
        raise RuntimeError("no database here")


@app.task(executor="process")
def work() -> None:
    return None
