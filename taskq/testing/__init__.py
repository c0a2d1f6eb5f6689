"""Testing helpers for apps built on taskq (`pip install 'taskq[testing]'`).

```python
from taskq.testing import worker
from myapp.tasks import app, add

async def test_add(taskq_server):            # the pytest plugin's embedded nats-server
    async with worker(app) as w:              # app -> that server, this test's own prefix
        handle = await add.enqueue(1, 2)
        await w.drain()                       # queues empty, schedules due so far run
    assert w.results[handle.id].result == 3
```

The pytest plugin (`taskq.testing.plugin`, registered through the `pytest11` entry point)
gives `taskq_server` (session: a nats-server on a loopback port it binds itself, temp store; `.url`)
and `taskq_prefix` (per test). See docs/testing.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from taskq.testing.environment import TestEnvironment, active, configure

if TYPE_CHECKING:
    from taskq.testing.drain import DrainTimeout
    from taskq.testing.harness import Results, TestWorker, worker

__all__ = [
    "DrainTimeout",
    "Results",
    "TestEnvironment",
    "TestWorker",
    "active",
    "configure",
    "worker",
]

# Imported on first use: pytest loads the plugin (and so this package) in every session of
# a project that has taskq installed, and the worker runtime is not needed to collect tests.
_LAZY = {
    "DrainTimeout": "taskq.testing.drain",
    "Results": "taskq.testing.harness",
    "TestWorker": "taskq.testing.harness",
    "worker": "taskq.testing.harness",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'taskq.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
