"""Tasks for the process pool tests (`executor="process"`): module-level, as the pool
processes import them by module and name."""

from __future__ import annotations

import os
import threading
import time
from typing import Annotated

from pydantic import AfterValidator, PlainSerializer

import taskq
from taskq import App

app = App()


def _note(line: str) -> None:
    path = os.environ.get("TASKQ_TEST_LEDGER")
    if path:
        with open(path, "a") as ledger:
            ledger.write(f"{line} {os.getpid()}\n")


@app.on_worker_start
def started() -> None:
    _note("hook-start")


@app.on_worker_start(children=False)
def started_in_worker_only() -> None:
    _note("hook-worker-only")


def spin(seconds: float) -> int:
    """Pure-Python work holding the GIL for about `seconds`."""
    deadline = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < deadline:
        n += 1
    return n


@app.task(executor="process")
def burn(seconds: float) -> dict[str, float]:
    """CPU-bound: returns where and when it ran."""
    begun = time.time()
    spin(seconds)
    return {"pid": os.getpid(), "start": begun, "end": time.time()}


@app.task(executor="process", timeout=1.0, max_retries=2, backoff=0.05, jitter=0.0)
def hang_first(token: str) -> dict[str, int]:
    """Hangs (ignoring SIGTERM) on its first attempt; answers on the next."""
    ctx = taskq.current()
    if ctx.attempt == 1:
        _note(f"hanging {token}")
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
        time.sleep(10**6)
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@app.task(executor="process", max_retries=1, backoff=0.05, jitter=0.0)
def die(code: int) -> None:
    _note("dying")
    os._exit(code)


@app.task(executor="process", timeout=30.0)
def whoami(label: str) -> dict[str, object]:
    ctx = taskq.current()
    deadline = ctx.deadline
    return {
        "label": label,
        "id": ctx.id,
        "task": ctx.task,
        "attempt": ctx.attempt,
        "queue": ctx.queue,
        "deadline": deadline.isoformat() if deadline else None,
        "pid": os.getpid(),
    }


@app.task(executor="process")
async def async_in_child(x: int) -> dict[str, int]:
    return {"double": 2 * x, "pid": os.getpid()}


@app.task(executor="process", max_retries=3)
def bad_result() -> object:
    return threading.Lock()  # cannot be pickled


class Picky(Exception):
    """Cannot be rebuilt from its args: pickles, but does not unpickle."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}/{b}")


@app.task(executor="process", max_retries=0)
def fails(kind: str) -> None:
    if kind == "picky":
        raise Picky(1, 2)
    raise ValueError(f"bad {kind}")


class Sealed:
    """Valid as an argument, but it cannot leave its process."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __reduce__(self) -> str:
        raise TypeError("Sealed objects stay in their process")


@app.task(executor="process", max_retries=3)
def takes_sealed(
    value: Annotated[str, AfterValidator(Sealed), PlainSerializer(lambda s: s.value)],
) -> str:
    return "never"


@app.task(executor="process", queue="long", ack_wait=0.5)
def outlasts_its_lease(seconds: float) -> int:
    spin(seconds)
    return taskq.current().attempt


@app.task(executor="process", queue="control")
def long_spin(steps: int) -> int:
    """Reports progress from the child while it works; runs until killed if steps is big."""
    ctx = taskq.current()
    _note(f"spinning {ctx.id}")
    for step in range(steps):
        spin(0.01)
        ctx.progress((step + 1) / steps, f"step {step + 1}")
    return steps
