"""A full store never wedges taskq, on real servers with tiny limits.

Before: the first enqueue past `max_file_store` hung (a 503 retried as transient), and a
worker retried its result writes forever, so it never acked and never freed space.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from taskq import App
from taskq.cli.queues import table
from taskq.dlq.browse import Filters, list_dead
from taskq.errors import StorageFull
from taskq.operate.queue_stats import snapshot
from taskq.server import EmbeddedServer
from tests.conftest import finishes, running_worker, wait_until

BODY = "x" * 10_000  # 10 KB tasks, as in the issue


def small_server(tmp_path: Path, jetstream: str, accounts: str = "") -> EmbeddedServer:
    conf = tmp_path / "server.conf"
    store = tmp_path / "store"
    conf.write_text(f'jetstream {{\n store_dir: "{store}"\n {jetstream}\n}}\n{accounts}')
    return EmbeddedServer(store_dir=store, config=str(conf), log_file=tmp_path / "server.log")


@pytest.fixture
def full_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A server whose whole store is 3 MB: about 300 of these tasks."""
    with small_server(tmp_path, "max_file_store: 3MB") as server:
        yield server


@pytest.fixture
async def small_app(full_server: EmbeddedServer) -> AsyncIterator[App]:
    app = App(url=full_server.url, prefix="full")
    yield app
    await app.aclose()


async def fill(enqueue: object, app: App) -> tuple[int, StorageFull, float]:
    """Enqueue 10 KB tasks until the store refuses one: (stored, the error, its seconds)."""
    stored = 0
    while True:
        started = time.monotonic()
        try:
            await finishes(enqueue(BODY), "an enqueue")  # type: ignore[operator]
        except StorageFull as exc:
            return stored, exc, time.monotonic() - started
        stored += 1
        assert stored < 2000, "the store never filled"


def retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The retries taskq logged (taskq.retrying logs each retry of a transient error)."""
    return [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]


async def test_enqueue_into_a_full_store_fails_fast_and_the_drain_frees_it(
    small_app: App, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    @small_app.task
    def work(body: str) -> int:
        ran.append(len(body))
        return len(body)

    caplog.set_level(logging.INFO, logger="taskq")
    stored, error, took = await fill(work.enqueue, small_app)
    print(f"stored {stored} tasks; enqueue past the limit failed in {took * 1000:.1f} ms")
    assert 250 < stored < 320
    # fails at once: not retried as transient (each retry is logged) until a deadline
    assert retries(caplog) == []
    assert "max_file_store" in str(error) and "\n" not in str(error)
    assert "max_file_store" in error.limit and error.status == 503
    with pytest.raises(StorageFull):  # the bulk path too: refused, not re-sent until a deadline
        await finishes(work.enqueue_many([BODY] * 5), "a refused enqueue_many")
    assert retries(caplog) == []

    # `taskq queues` shows how full it is (account storage; the queue's own bytes)
    stats = await snapshot(small_app, ["default"], 0)
    assert stats[0].bytes > stored * 10_000 and stats[0].storage_used >= stats[0].bytes
    assert "STORED" in table(stats) and "storage: 3.0 MiB used" in table(stats)
    assert stats[0].to_dict()["storage_limit"] is None  # the server's limit, not the account's

    async with running_worker(small_app, concurrency=8) as worker:
        started = time.monotonic()
        await wait_until(lambda: worker.stats["succeeded"] == stored, timeout=30)
        print(f"drained {stored} tasks from the full store in {time.monotonic() - started:.2f}s")
        handle = await work.enqueue("again")  # space freed: enqueue works again
        assert await handle.result(timeout=10) == 5
    assert len(ran) == stored + 1


@pytest.mark.slow  # ~6 s: the refused delivery comes back after the worker's 5 s NAK delay
async def test_a_task_failing_on_a_full_store_keeps_its_dead_letter(small_app: App) -> None:
    """The DLQ write is refused while the store is full: the task is not terminated but
    redelivered, and dead-lettered once the drain made room; its record is never lost."""

    @small_app.task(max_retries=0)
    def flaky(body: str) -> int:
        if body == "fail":
            raise ValueError("boom")
        return len(body)

    failing = [await flaky.enqueue("fail") for _ in range(2)]
    stored, _, _ = await fill(flaky.enqueue, small_app)
    async with running_worker(small_app, concurrency=8) as worker:
        total = stored + len(failing)
        await wait_until(
            lambda: worker.stats["succeeded"] + worker.stats["dead"] == total, timeout=30
        )
        assert worker.stats["dead"] == len(failing)
    dead = await list_dead(small_app, Filters(queue="default"))
    assert sorted(r.id for r in dead) == sorted(h.id for h in failing)


async def test_an_account_storage_limit_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="taskq")
    accounts = "accounts { T: { jetstream: { max_file: 1MB }, users: [{user: t, password: t}] } }\n"
    with small_server(tmp_path, "", accounts) as server:
        app = App(url=server.url, prefix="acct", user="t", password="t")
        try:

            @app.task
            def work(body: str) -> int:
                return len(body)

            stored, error, _ = await fill(work.enqueue, app)
            assert 50 < stored < 110 and retries(caplog) == []  # refused at once, not retried
            assert "account" in error.limit and "max_file" in str(error)
            stats = await snapshot(app, ["default"], 0)
            assert stats[0].storage_limit == 1024 * 1024
            # full to within the last message or two: 99% or 100% as the last one's size falls
            used = re.search(r"KiB used of 1\.0 MiB \((\d+)%\)", table(stats))
            assert used is not None and int(used.group(1)) >= 99, table(stats)
        finally:
            await app.aclose()


@pytest.mark.heavy
async def test_attempts_a_full_store_spent_are_a_letter_naming_the_store(
    full_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 38 (9): a task whose dead letter the full store refused is handed back; when
    its attempts have run out that way, its letter names the store, not a dead worker."""
    import nats

    app = App(url=full_server.url, prefix="unstored")

    @app.task(max_retries=0)
    def fails() -> None:
        raise ValueError("always")

    caplog.set_level(logging.WARNING, logger="taskq")
    try:
        await fails.enqueue()
        nc = await nats.connect(full_server.url)
        js = nc.jetstream()
        await js.add_stream(name="FILLER", subjects=["filler.>"])
        for _ in range(1000):
            try:
                await js.publish("filler.x", BODY.encode())
            except nats.js.errors.APIError:
                break
        else:
            raise AssertionError("the store never filled")
        refused = "its outcome not stored"
        async with running_worker(app):
            # its letter refused on its only attempt, then on the one the hand-back spent
            await wait_until(
                lambda: sum(refused in r.getMessage() for r in caplog.records) >= 2, timeout=60
            )
            await js.purge_stream("FILLER")
            await nc.close()

            async def lettered() -> bool:
                return bool(await list_dead(app))

            await wait_until(lettered, timeout=60)
        (letter,) = await list_dead(app)
        assert letter.reason == "unstored"
        assert "could not be stored" in letter.error.message
        assert "storage" in letter.error.message.lower()
    finally:
        await app.aclose()
