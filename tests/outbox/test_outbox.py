"""The outbox's guarantees, from outside, on real Postgres and SQLite: a rolled-back
transaction runs none of its tasks, a committed one runs each once; options apply as to
`enqueue`; bad arguments fail at the call; rows the relay cannot publish are dead-lettered
with their reason while the rest go on; Postgres wakes the relay by NOTIFY."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, create_engine, insert, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from taskq import App
from taskq.dlq.browse import list_dead
from taskq.errors import ArgumentsError, ConfigError
from taskq.outbox.database import engine as async_engine
from taskq.outbox.database import parse
from taskq.outbox.table import outbox
from taskq.records.results import fetch
from tests.conftest import running_worker, wait_until
from tests.outbox.conftest import running_relay

orders = Table("orders", MetaData(), Column("id", Integer, primary_key=True))


def sync_engine(url: str) -> Any:
    """The app's own engine: psycopg for Postgres, the standard sqlite3 for SQLite."""
    parsed = parse(url)
    driver = "postgresql+psycopg" if parsed.get_backend_name() == "postgresql" else "sqlite"
    made = create_engine(parsed.set(drivername=driver))
    orders.metadata.create_all(made)
    return made


async def waiting_rows(url: str, prefix: str) -> int:
    made = async_engine(url)
    try:
        async with made.connect() as connection:
            found = await connection.execute(select(outbox.c.id).where(outbox.c.prefix == prefix))
            return len(found.all())
    finally:
        await made.dispose()


def tasks_of(app: App) -> tuple[Any, Any, list[int]]:
    ran: list[int] = []

    @app.task
    async def receipt(order: int) -> int:
        ran.append(order)
        return order * 10

    @app.task(queue="emails")
    async def email(to: str) -> str:
        return to

    return receipt, email, ran


async def test_a_rolled_back_transaction_runs_nothing_a_committed_one_runs_each_once(
    app: App, db_url: str, prefix: str
) -> None:
    receipt, _, ran = tasks_of(app)
    made = sync_engine(db_url)
    # Given two orders saved with their receipts in one transaction (a Connection), one
    # more in a Session, and a transaction that rolls back after enqueueing
    with made.begin() as connection:
        connection.execute(insert(orders), [{"id": 1}, {"id": 2}])
        committed = [receipt.enqueue_in(connection, 1), receipt.enqueue_in(connection, 2)]
    with Session(made) as session, session.begin():
        session.execute(insert(orders), [{"id": 3}])
        committed.append(receipt.enqueue_in(session, 3))
    with pytest.raises(RuntimeError), made.begin() as connection:
        connection.execute(insert(orders), [{"id": 4}])
        rolled_back = receipt.enqueue_in(connection, 4)
        raise RuntimeError("the order failed")
    assert await waiting_rows(db_url, prefix) == 3
    # When a relay and a worker run
    async with running_worker(app, concurrency=4), running_relay(app, db_url, poll=0.05) as relay:
        results = [await h.result(timeout=30) for h in committed]
        await wait_until(lambda: relay.stats["published"] == 3)
    # Then each committed task ran once, with the id its handle had at the call; the
    # rolled-back one never reached the server; the outbox is empty
    assert results == [10, 20, 30] and sorted(ran) == [1, 2, 3]
    assert await fetch(app, rolled_back.id) is None
    assert await waiting_rows(db_url, prefix) == 0
    made.dispose()


async def test_the_async_api_options_and_validation(app: App, db_url: str, prefix: str) -> None:
    receipt, email, ran = tasks_of(app)
    made = create_async_engine(async_engine(db_url).url)
    # Given an AsyncSession writing with options: a key (twice: one run), another queue
    async with AsyncSession(made) as session, session.begin():
        keyed = await receipt.options(key="order-7").enqueue_in_async(session, 7)
        again = await receipt.options(key="order-7").enqueue_in_async(session, 7)
        mailed = await email.enqueue_in_async(session, "a@example.com")
        # bad arguments and options fail at the call, as `enqueue` does: nothing written
        with pytest.raises(ArgumentsError):
            await receipt.enqueue_in_async(session, "not a number")
        with pytest.raises(ConfigError):
            await receipt.options(unique_for=60).enqueue_in_async(session, 8)
    await made.dispose()
    assert keyed.id == again.id == "order-7" and mailed.queue == "emails"
    async with running_worker(app, queues=["default", "emails"]), running_relay(app, db_url):
        assert await keyed.result(timeout=30) == 70
        assert await mailed.result(timeout=30) == "a@example.com"
    assert ran == [7]  # the second row of the same key was the server's duplicate


async def test_rows_the_relay_cannot_publish_are_dead_lettered_and_the_rest_go_on(
    app: App, db_url: str, prefix: str
) -> None:
    receipt, _, ran = tasks_of(app)
    app.configure(payload_limit=1_500_000)  # the oversize row below: 2 MB
    made = sync_engine(db_url)
    good = dict(prefix=prefix, queue="default", created_at=_now())
    body = json.dumps({"v": 1, "id": "ok-1", "task": receipt.name, "args": [1]}).encode()
    hostile = [
        {**good, "task_id": "junk", "body": b"\xff not json"},  # undecodable
        {
            **good,
            "task_id": "who",
            "body": body.replace(b"ok-1", b"who").replace(receipt.name.encode(), b"no.such.task"),
        },
        {**good, "task_id": "q", "queue": "bad queue>*", "body": body.replace(b"ok-1", b"q")},
    ]
    with made.begin() as connection:
        big = receipt.enqueue_in(connection, 0)  # placeholder: replaced by an oversize body
        connection.execute(
            outbox.update()
            .where(outbox.c.task_id == big.id)
            .values(body=_oversize(big.id, receipt.name))
        )
        connection.execute(insert(outbox), hostile)
        fine = receipt.enqueue_in(connection, 5)
    async with running_worker(app), running_relay(app, db_url, poll=0.05) as relay:
        assert await fine.result(timeout=30) == 50
        await wait_until(lambda: relay.stats["dead"] == 4)
        dead = {d.id: d for d in await list_dead(app)}
    assert ran == [5]
    reasons = sorted(d.reason for d in dead.values())
    assert reasons == ["undecodable", "unknown_task", "unpublishable", "unpublishable"], dead
    assert dead[big.id].reason == dead["q"].reason == "unpublishable"
    assert dead["who"].reason == "unknown_task"
    assert await waiting_rows(db_url, prefix) == 0
    made.dispose()


def _oversize(task_id: str, task: str) -> bytes:
    return json.dumps(
        {"v": 1, "id": task_id, "task": task, "args": [0], "meta": {"pad": "x" * 2_000_000}}
    ).encode()


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


async def test_a_commit_wakes_the_postgres_relay_at_once(app: App, pg_url: str) -> None:
    receipt, _, _ = tasks_of(app)
    made = sync_engine(pg_url)
    # Given a relay that would poll only once an hour: only NOTIFY can wake it
    async with running_worker(app), running_relay(app, pg_url, poll=3600):
        with made.begin() as connection:
            handle = receipt.enqueue_in(connection, 9)
        assert await handle.result(timeout=20) == 90
    made.dispose()
