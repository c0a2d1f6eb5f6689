"""The app of the CPU-bound benchmark (`bench/processes.py`): one pure-Python task of a
fixed amount of work (about 20 ms on one core), once as a plain `def` (threads) and once on
the process pool. A fixed amount of work, not a wall-clock deadline: threads sharing the GIL
would each stop on time having done less."""

from __future__ import annotations

import time

from taskq import App

app = App()


def crunch(rounds: int) -> int:
    """Pure-Python work: `rounds` iterations holding the GIL throughout."""
    total = 0
    for i in range(rounds):
        total += i * i % 7
    return total


def rounds_for(seconds: float) -> int:
    """How many `crunch` rounds take about `seconds` on one core of this machine."""
    probe = 200_000
    started = time.perf_counter()
    crunch(probe)
    return max(1, int(probe * seconds / (time.perf_counter() - started)))


@app.task(queue="threads")
def in_thread(rounds: int) -> None:
    crunch(rounds)


@app.task(queue="procs", executor="process")
def in_process(rounds: int) -> None:
    crunch(rounds)


@app.batch_task(queue="spark", batch_size=500, max_wait=0.2)
def in_spark(rounds: int) -> None:
    """The same work as a Spark batch task: one item per message, a Spark job per batch."""
    crunch(rounds)
