"""Worker lifecycle hooks: `@app.on_worker_start` and `@app.on_worker_stop`.

Start hooks run once per worker process before it fetches its first task (e.g. open a
database pool); a start hook that raises stops the worker with a one-line HookError. Stop
hooks run after running tasks are settled; one that raises is logged and the others still
run. Hooks take no arguments and may be plain functions (run on the worker's event loop
thread, so keep them short) or coroutine functions.

The pool processes of `executor="process"` tasks run tasks too, so they run the same
hooks, once each, at their start and graceful stop; a hook registered with
`children=False` runs in the worker process only.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from taskq.errors import HookError

log = logging.getLogger("taskq.worker")
Hook = Callable[[], Any]


class Hooks:
    """The start and stop hooks an app registered, in registration order."""

    def __init__(self) -> None:
        self.start: list[Hook] = []
        self.stop: list[Hook] = []
        self.worker_only: list[Hook] = []  # not run in pool processes (`children=False`)

    async def run_start(self, *, child: bool = False) -> None:
        """Run every start hook (in a pool process: those for children); raise HookError on
        the first that fails."""
        for hook in self._of(self.start, child):
            try:
                await _call(hook)
            except Exception as exc:
                raise HookError("start", _name(hook), exc) from exc

    async def run_stop(self, *, child: bool = False) -> None:
        """Run every stop hook (in a pool process: those for children); failures are
        logged, never raised."""
        for hook in self._of(self.stop, child):
            try:
                await _call(hook)
            except Exception as exc:
                log.error("%s", HookError("stop", _name(hook), exc))

    def _of(self, hooks: list[Hook], child: bool) -> list[Hook]:
        if not child:
            return hooks
        return [h for h in hooks if not any(h is w for w in self.worker_only)]


async def _call(hook: Hook) -> None:
    result = hook()
    if inspect.isawaitable(result):
        await result


def _name(hook: Hook) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)
