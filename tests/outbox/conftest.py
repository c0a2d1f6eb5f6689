"""The outbox's databases, for real: one Postgres per test process (Debian's `postgresql`,
installed by the test run when missing; tests/postgres.py) with the outbox table, and a
SQLite file per test. Each test writes rows under its own prefix."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from taskq import App
from taskq.outbox.database import create_table
from taskq.outbox.relay import Relay
from tests.postgres import PgServer, ensure_postgres
from tests.system_packages import Prerequisite

POSTGRES = Prerequisite("pg_url", ensure_postgres, "the outbox tests need Postgres")
DATABASES = ["postgres", "sqlite"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    POSTGRES.collected(items)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    POSTGRES.require()
    with PgServer() as server:
        asyncio.run(create_table(server.dsn))
        yield server


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    return pg_server.dsn


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    asyncio.run(create_table(url))
    return url


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test on Postgres, then on SQLite."""
    fixture = "pg_url" if request.param == "postgres" else "sqlite_url"
    return str(request.getfixturevalue(fixture))


@asynccontextmanager
async def running_relay(app: App, url: str, **options: float) -> AsyncIterator[Relay]:
    """A Relay of `app` on this event loop for the block."""
    relay = Relay(app, url, **options)  # type: ignore[arg-type]
    job = asyncio.create_task(relay.run())
    try:
        await asyncio.wait_for(asyncio.shield(relay.ready.wait()), 30)
        yield relay
    finally:
        relay.stop()
        await asyncio.wait_for(job, 30)
