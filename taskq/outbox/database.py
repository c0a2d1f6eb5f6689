"""The outbox's database from a URL: the async engine a relay uses (psycopg for Postgres,
aiosqlite for SQLite), the table's creation, and the dialect of a caller's connection."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from taskq.errors import ConfigError
from taskq.outbox.table import TABLE, metadata

DRIVERS = {"postgresql": "postgresql+psycopg", "sqlite": "sqlite+aiosqlite"}


def parse(url: str) -> URL:
    """`url` as a SQLAlchemy URL of a supported database (ConfigError: it is not one)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(f"not a database URL: {shown(url)!r}") from None
    backend = parsed.get_backend_name()
    if backend not in DRIVERS:
        raise ConfigError(f"the outbox runs on Postgres or SQLite, not {backend!r}")
    return parsed


def shown(url: str) -> str:
    """`url` fit for a message: its password hidden."""
    try:
        return str(make_url(url).render_as_string(hide_password=True))
    except ArgumentError:
        return url[:80]


def engine(url: str) -> AsyncEngine:
    """An async engine on `url` (the relay's, status'); the caller disposes of it."""
    parsed = parse(url)
    return create_async_engine(parsed.set(drivername=DRIVERS[parsed.get_backend_name()]))


def libpq(url: str) -> str:
    """A Postgres `url` as psycopg takes it (for LISTEN, on a connection of its own)."""
    return str(parse(url).set(drivername="postgresql").render_as_string(hide_password=False))


async def create_table(url: str) -> None:
    """Create the outbox table and its index where missing (`taskq outbox init`)."""
    from taskq.errors import OutboxDatabaseError

    made = engine(url)
    try:
        async with made.begin() as connection:
            await connection.run_sync(metadata.create_all)
    except Exception as exc:
        raise OutboxDatabaseError(shown(url), _first_line(exc)) from None
    finally:
        await made.dispose()


def dialect_of(db: Any) -> str:
    """The dialect name of a Connection, Session or their async forms."""
    bind = db.get_bind() if hasattr(db, "get_bind") else db
    return str(bind.dialect.name)


async def checked(url: str) -> AsyncEngine:
    """An engine on `url` whose database answers and has the outbox table; else
    OutboxDatabaseError (the engine disposed of)."""
    from sqlalchemy import inspect

    from taskq.errors import OutboxDatabaseError

    made = engine(url)
    try:
        async with made.connect() as connection:
            found = await connection.run_sync(lambda c: inspect(c).has_table(TABLE))
    except Exception as exc:
        await made.dispose()
        raise OutboxDatabaseError(shown(url), _first_line(exc)) from None
    if not found:
        await made.dispose()
        raise OutboxDatabaseError(shown(url), f"{TABLE} is missing", missing_table=True)
    return made


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return (text.strip().splitlines() or [type(exc).__name__])[0][:300]
