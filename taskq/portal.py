"""A private event loop in a daemon thread, so synchronous code can call async taskq.

`task.delay()` and `handle.result_sync()` run their coroutine here; the loop keeps its own
NATS connection, separate from any loop the caller may run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Portal:
    """Runs coroutines on a background loop and blocks the caller until they finish."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="taskq-portal", daemon=True
        )
        self._thread.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            if threading.current_thread() is not self._thread:
                # Blocking here would freeze the caller's loop; the async API is the way.
                coro.close()
                raise RuntimeError(
                    "called a synchronous taskq API from inside an event loop: "
                    "use the async form (e.g. `await task.enqueue(...)`)"
                )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
