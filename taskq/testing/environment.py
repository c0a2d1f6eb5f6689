"""Which server and prefix the running test gives its apps (set by the pytest plugin).

A test that uses the `taskq_server` fixture gets an environment: its server's URL and a
prefix of its own. `taskq.testing.worker(app)` (or `configure(app)`) points `app` at them,
and the plugin puts every app it pointed back as it was when the test ends, so module-level
apps (the user's `tasks.app`) need no configuration in tests and carry none to the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from taskq.app import App
from taskq.settings import Settings


@dataclass
class TestEnvironment:
    """The running test's server URL and prefix, and the apps pointed at them."""

    __test__ = False  # pytest: not a test class

    url: str
    prefix: str
    _saved: dict[int, tuple[App, Settings]] = field(default_factory=dict)

    def adopt(self, app: App) -> bool:
        """Point `app` at this test's server and prefix; True the first time (its settings
        changed, so a connection it holds on the current loop is stale)."""
        if id(app) in self._saved:
            return False
        self._saved[id(app)] = (app, app.settings)
        app.configure(url=self.url, prefix=self.prefix)
        return True

    def restore(self) -> None:
        """Close what the apps opened from synchronous code (`delay()`), and give them back
        their own settings."""
        for app, settings in self._saved.values():
            app.close()
            app.settings = settings
        self._saved.clear()


_active: TestEnvironment | None = None


def active() -> TestEnvironment | None:
    """The running test's environment, or None (not in a test that uses `taskq_server`)."""
    return _active


@contextmanager
def activated(url: str, prefix: str) -> Iterator[TestEnvironment]:
    """Make (url, prefix) the running test's environment for the block."""
    global _active
    environment = _active = TestEnvironment(url, prefix)
    try:
        yield environment
    finally:
        _active = None
        environment.restore()


def configure(app: App) -> None:
    """Point `app` at the running test's server and prefix, as `worker(app)` does by itself:
    for a test that enqueues before it starts a worker. Outside such a test, nothing."""
    environment = active()
    if environment is not None:
        environment.adopt(app)
