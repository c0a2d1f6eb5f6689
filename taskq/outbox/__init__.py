"""The transactional outbox: tasks enqueued inside the application's own database
transaction (`task.enqueue_in(db, ...)`), published by a relay once committed.

A rolled-back transaction leaves no row, so none of its tasks run; a committed row is
published with its task id as `Nats-Msg-Id` and deleted only after the server stored it, so
a relay that dies in between publishes it again into the stream's dedup window (docs/outbox.md).
Nothing here is imported by `import taskq`: SQLAlchemy loads with the first outbox call.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from taskq.errors import ConfigError


def load(module: str) -> ModuleType:
    """`taskq.outbox.<module>`, or ConfigError naming the extra when SQLAlchemy is missing."""
    try:
        return importlib.import_module(f"taskq.outbox.{module}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("sqlalchemy", "psycopg", "aiosqlite"):
            raise ConfigError(f"the outbox needs {exc.name}: pip install 'taskq[outbox]'") from None
        raise
