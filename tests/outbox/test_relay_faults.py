"""The relay under faults, for real: SIGKILLed between publishing and deleting (then
restarted), NATS away for a while, and several relays on one Postgres table."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from taskq import App
from taskq.outbox.claim import claim
from taskq.outbox.database import engine, parse
from taskq.outbox.table import outbox
from tests.apps import outboxed
from tests.conftest import ROOT, cli_argv, running_worker, wait_until
from tests.faults import DELAY, inject
from tests.outbox.conftest import running_relay
from tests.outbox.test_outbox import waiting_rows
from tests.proxy import Proxy

SPEC = "tests.apps.outboxed:app"


def write_receipts(url: str, orders: range) -> list[str]:
    """One committed transaction per 50 orders, each with its receipt task; their ids."""
    parsed = parse(url)
    driver = "postgresql+psycopg" if parsed.get_backend_name() == "postgresql" else "sqlite"
    made = create_engine(parsed.set(drivername=driver))
    ids = []
    for start in range(orders.start, orders.stop, 50):
        with made.begin() as connection:
            for order in range(start, min(start + 50, orders.stop)):
                ids.append(outboxed.receipt.enqueue_in(connection, order).id)
    made.dispose()
    return ids


def start_relay(
    nats_url: str, prefix: str, db: str, ledger: Path, **env: str
) -> subprocess.Popen[bytes]:
    argv = cli_argv(nats_url, prefix, "-v", "outbox", "relay", SPEC, "--db", db, "--batch", "40")
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "TASKQ_TEST_LEDGER": str(ledger), **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def no_rows_left(url: str, prefix: str) -> bool:
    return await waiting_rows(url, prefix) == 0


def runs(ledger: Path) -> Counter[str]:
    return Counter(ledger.read_text().splitlines()) if ledger.exists() else Counter()


async def drained(app: App) -> bool:
    """Every message of the app's default queue settled (a work queue keeps none after)."""
    broker = (await app.client()).connection
    return (await broker.streams.state(app.names.queue_stream("default"))).messages == 0


async def test_a_relay_killed_between_publish_and_delete_loses_none_runs_none_twice(
    nats_url: str, prefix: str, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("TASKQ_TEST_LEDGER", str(ledger))  # the in-process worker's tasks
    outboxed.app.configure(url=nats_url, prefix=prefix)
    write_receipts(db_url, range(200))
    # Given a relay that SIGKILLs itself after its second pass published 40 rows (not
    # deleted: the transaction dies with the process)
    dying = start_relay(nats_url, prefix, db_url, ledger, TASKQ_TEST_DIE_AFTER_PUBLISH="2")
    await wait_until(lambda: dying.poll() is not None, timeout=60)
    assert dying.returncode == -9
    assert await waiting_rows(db_url, prefix) == 200 - 40  # the first pass's rows deleted
    # When a relay starts again and a worker runs the tasks
    healthy = start_relay(nats_url, prefix, db_url, ledger)
    try:
        async with running_worker(outboxed.app, concurrency=8):
            await wait_until(lambda: no_rows_left(db_url, prefix), timeout=60)
            await wait_until(lambda: drained(outboxed.app), timeout=60)
    finally:
        healthy.terminate()
        healthy.wait(30)
    # Then every order's receipt ran exactly once: the second pass's 40 rows, published
    # twice, met the stream's dedup window
    assert runs(ledger) == Counter(f"receipt {n}" for n in range(200))
    assert await waiting_rows(db_url, prefix) == 0
    await outboxed.app.aclose()


async def test_a_nats_outage_only_grows_the_outbox_and_it_drains_after(
    app: App,
    nats_url: str,
    prefix: str,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKQ_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    outboxed.app.configure(url=nats_url, prefix=prefix)
    link = await Proxy(int(nats_url.rsplit(":", 1)[1])).start()
    relayed = App(url=link.url, prefix=prefix)  # the relay reaches NATS through the proxy
    relayed.tasks.update(outboxed.app.tasks)
    try:
        async with running_relay(relayed, db_url, poll=0.05) as relay:
            # Given NATS unreachable from the relay
            link.cut()
            ids = write_receipts(db_url, range(100))
            # Then the rows wait in the outbox while the relay tries to publish them
            await wait_until(lambda: relay.stats["claimed"] >= 100, timeout=60)
            assert await waiting_rows(db_url, prefix) == 100 and relay.stats["published"] == 0
            # When NATS is back, they drain, each run once
            link.restore()
            async with running_worker(outboxed.app, concurrency=8):
                await wait_until(lambda: no_rows_left(db_url, prefix), timeout=60)
                await wait_until(lambda: drained(outboxed.app), timeout=60)
    finally:
        await relayed.aclose()
        await link.close()
        await outboxed.app.aclose()
    assert runs(tmp_path / "ledger.txt") == Counter(f"receipt {n}" for n in range(100))
    assert len(set(ids)) == 100


async def test_two_relays_on_postgres_publish_each_row_once_in_commit_order(
    nats_url: str, prefix: str, pg_url: str
) -> None:
    from tests.powercut.streams import task_ids_in_stream

    outboxed.app.configure(url=nats_url, prefix=prefix)
    other = App(url=nats_url, prefix=prefix)  # a second relay, on a connection of its own
    other.tasks.update(outboxed.app.tasks)
    ids = write_receipts(pg_url, range(600))
    subject = outboxed.app.names.queue_subject("default", outboxed.receipt.name)
    try:
        with inject((await outboxed.app.client()).connection) as faults:
            # Given the first relay's first publish slowed down: without a lock per queue,
            # the second relay's rows would be stored before it
            faults.delay(subject, seconds=0.5)
            async with (
                running_relay(outboxed.app, pg_url, batch=50, poll=0.05) as one,
                running_relay(other, pg_url, batch=50, poll=0.05) as two,
            ):
                await wait_until(lambda: no_rows_left(pg_url, prefix), timeout=60)
        stream = outboxed.app.names.queue_stream("default")
        assert await task_ids_in_stream(outboxed.app, stream) == ids
        assert one.stats["published"] + two.stats["published"] == 600
        assert faults.seen(subject, DELAY)
    finally:
        await other.aclose()
        await outboxed.app.aclose()


async def test_a_claim_never_takes_a_queue_s_later_rows_ahead_of_its_older_ones(
    nats_url: str, prefix: str, pg_url: str
) -> None:
    """A relay's claim tries the queue's advisory lock row by row as its scan goes: when it
    passes older rows (locked by another transaction, or while another relay held the lock
    and then committed), the rows it then takes are not the queue's oldest. Publishing them
    would put them ahead of the older ones, so such a claim takes none of that queue (the
    two-relay test met this once in a full run: 40 rows published 400 early)."""
    outboxed.app.configure(url=nats_url, prefix=prefix)
    ids = write_receipts(pg_url, range(10))
    sync = create_engine(parse(pg_url).set(drivername="postgresql+psycopg"))
    database = engine(pg_url)
    try:
        with sync.begin() as other:  # another transaction holds the 3 oldest rows
            oldest = select(outbox.c.id).where(outbox.c.prefix == prefix).order_by(outbox.c.id)
            other.execute(oldest.limit(3).with_for_update())
            async with database.begin() as connection:
                assert await claim(connection, prefix, 50) == []
            other.rollback()
        async with database.begin() as connection:
            claimed = await claim(connection, prefix, 50)
        assert [row.task_id for row in claimed] == ids  # all, oldest first, once free
    finally:
        sync.dispose()
        await database.dispose()
